// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/peers/libtorch_mf/libtorch_mf.cpp
/// @brief The libtorch C++ peer of `tutti_bench_cpu_mf`: the same matrix factorisation
/// (logistic loss, L2 on the touched rows weighted per sample, Adam), on the same data, from
/// the same initial parameters, in the same batch order, in one process on the CPU.
///
///   libtorch_mf DIR [--threads N] [--json PATH]
///
/// DIR is what `tutti_bench_cpu_mf --out DIR` wrote (it reads the world-size-1 order). Prints
/// per-epoch loss and samples/s; the first epoch is reported as warm-up. An epoch's time covers
/// its steps only (the batch order is read from disk before), and the loss summed for the report
/// stays on the tensor side until the epoch ends, so a step never waits to report it.

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// The whole of a raw little-endian file as a 1-d tensor of `dtype`.
torch::Tensor read_raw(const std::string& path, torch::Dtype dtype) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot read " + path);
  const auto bytes = static_cast<std::int64_t>(f.tellg());
  const auto element = static_cast<std::int64_t>(torch::elementSize(dtype));
  torch::Tensor t = torch::empty({bytes / element}, torch::TensorOptions().dtype(dtype));
  f.seekg(0);
  f.read(static_cast<char*>(t.data_ptr()), bytes);
  if (!f) throw std::runtime_error("short read of " + path);
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: libtorch_mf DIR [--threads N] [--json PATH]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::string json_path;
  int threads = 0;
  for (int k = 2; k < argc; ++k) {
    const std::string a = argv[k];
    if (a == "--threads" && k + 1 < argc)
      threads = std::atoi(argv[++k]);
    else if (a == "--json" && k + 1 < argc)
      json_path = argv[++k];
    else {
      std::fprintf(stderr, "libtorch_mf: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  try {
    const int default_threads = torch::get_num_threads();
    if (threads > 0) torch::set_num_threads(threads);
    std::ifstream mf(dir + "/meta.json");
    if (!mf) throw std::runtime_error("cannot read " + dir + "/meta.json");
    const nlohmann::json meta = nlohmann::json::parse(mf);
    const auto n = meta["rows"].get<std::int64_t>();
    const auto batch = meta["batch"].get<std::int64_t>();
    const auto epochs = meta["epochs"].get<int>();
    const double lr = meta["lr"].get<double>();
    const double l2 = meta["l2"].get<double>();

    const torch::Tensor users = read_raw(dir + "/users.i32", torch::kInt32).to(torch::kInt64);
    const torch::Tensor items = read_raw(dir + "/items.i32", torch::kInt32).to(torch::kInt64);
    const torch::Tensor labels = read_raw(dir + "/labels.f32", torch::kFloat32);
    const torch::Tensor init = read_raw(dir + "/init.f32", torch::kFloat32);
    const auto param = [&](const std::string& name) {
      for (const auto& s : meta["segments"])
        if (s["name"] == name) {
          const auto off = s["offset"].get<std::int64_t>();
          const auto rows = s["rows"].get<std::int64_t>(), cols = s["cols"].get<std::int64_t>();
          return init.narrow(0, off, rows * cols).reshape({rows, cols}).clone().requires_grad_();
        }
      throw std::runtime_error("meta.json has no segment " + name);
    };
    torch::Tensor P = param("user_embedding"), Q = param("item_embedding");
    torch::Tensor bu = param("user_bias"), bi = param("item_bias"), g = param("global_bias");
    torch::optim::Adam opt({P, Q, bu, bi, g}, torch::optim::AdamOptions(lr));
    std::vector<torch::Tensor> orders;
    for (int e = 0; e < epochs; ++e)
      orders.push_back(read_raw(dir + "/order" + std::to_string(e) + "_w1_r0.u64", torch::kInt64));

    struct record {
      int epoch;
      double seconds, loss, samples_per_s;
    };
    std::vector<record> rows;
    for (int e = 0; e < epochs; ++e) {
      const torch::Tensor& order = orders[static_cast<std::size_t>(e)];
      torch::Tensor loss_sum = torch::zeros({}, torch::kFloat64);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t b = 0; b < n; b += batch) {
        const std::int64_t m = std::min(batch, n - b);
        const torch::Tensor idx = order.narrow(0, b, m);
        const torch::Tensor u = users.index_select(0, idx), i = items.index_select(0, idx);
        const torch::Tensor y = labels.index_select(0, idx);
        // Advanced indexing, as P[u] in Python: its backward (index_put_ with accumulation)
        // measured faster here than index_select's (index_add_).
        const torch::Tensor pu = P.index({u}), qi = Q.index({i});
        const torch::Tensor bu_u = bu.index({u, 0}), bi_i = bi.index({i, 0});
        const torch::Tensor s = g.squeeze() + bu_u + bi_i + (pu * qi).sum(1);
        const torch::Tensor data =
            torch::binary_cross_entropy_with_logits(s, y, {}, {}, at::Reduction::None);
        const torch::Tensor reg =
            l2 * ((pu * pu).sum(1) + (qi * qi).sum(1) + bu_u * bu_u + bi_i * bi_i);
        const torch::Tensor loss = (data + reg).mean();
        opt.zero_grad();
        loss.backward();
        opt.step();
        loss_sum += data.detach().sum().to(torch::kFloat64);
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rows.push_back({e + 1, secs, loss_sum.item<double>() / double(n), double(n) / secs});
    }

    std::printf(
        "libtorch_mf: libtorch %s, %d intra-op thread(s) (default %d), %lld interactions, dim %d, "
        "batch %lld, Adam lr %g\n",
        TORCH_VERSION, torch::get_num_threads(), default_threads, static_cast<long long>(n),
        meta["dim"].get<int>(), static_cast<long long>(batch), lr);
    std::printf("%6s  %10s  %12s  %14s\n", "epoch", "seconds", "train loss", "samples/s");
    std::vector<double> sps;
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : rows) {
      std::printf("%6d  %10.4f  %12.6f  %14.0f%s\n", r.epoch, r.seconds, r.loss, r.samples_per_s,
                  r.epoch == 1 ? "  (warm-up)" : "");
      if (r.epoch > 1) sps.push_back(r.samples_per_s);
      results.push_back({{"epoch", r.epoch},
                         {"seconds", r.seconds},
                         {"train_loss", r.loss},
                         {"samples_per_s", r.samples_per_s}});
    }
    std::printf("median samples/s after the warm-up: %.0f; final train loss %.6f\n", median(sps),
                rows.back().loss);
    if (!json_path.empty()) {
      const nlohmann::json j = {{"peer", "libtorch"},
                                {"torch", TORCH_VERSION},
                                {"threads", torch::get_num_threads()},
                                {"default_threads", default_threads},
                                {"hardware_threads", std::thread::hardware_concurrency()},
                                {"samples_per_s", median(sps)},
                                {"final_train_loss", rows.back().loss},
                                {"results", results}};
      std::ofstream(json_path) << j.dump(2) << '\n';
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_mf: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
