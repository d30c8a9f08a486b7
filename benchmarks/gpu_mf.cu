// SPDX-License-Identifier: Apache-2.0
// tutti_bench_gpu_mf: matrix factorisation training on the CUDA space, the bandwidth it achieves
// against a device-to-device copy measured in the same run, and the files that let
// benchmarks/peers/torch_mf.py train the same model in PyTorch on the same data, from the same
// initial parameters, in the same batch order.
//
//   tutti_bench_gpu_mf --out DIR [--learners N --courses M --dim 64 --batch 65536 --epochs 2]
//
// Prints a table; with --json PATH writes {gpu, copy_gbs, results:[...]}.
#include "common.hpp"

#include <tutti/space/cuda.hpp>
#include <tutti/tutti.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (the
// convention of bandwidthTest and of the roofline below): the best of several 1 GiB copies.
double copy_bandwidth_gbs(cudaStream_t stream) {
  const std::size_t bytes = std::size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  TUTTI_CUDA_CHECK(cudaMalloc(&a, bytes));
  TUTTI_CUDA_CHECK(cudaMalloc(&b, bytes));
  TUTTI_CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, stream));
  cudaEvent_t start, stop;
  TUTTI_CUDA_CHECK(cudaEventCreate(&start));
  TUTTI_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    TUTTI_CUDA_CHECK(cudaEventRecord(start, stream));
    TUTTI_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    TUTTI_CUDA_CHECK(cudaEventRecord(stop, stream));
    TUTTI_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TUTTI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) best = std::max(best, 2.0 * double(bytes) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return best;
}

template <class T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw tutti::error("cannot write " + path);
}

// Rows of the two tables a step touches, summed over the steps of epoch `epoch`'s batch order:
// what lazy Adam reads and writes besides the batch (each touched row once per step).
double touched_rows_in_epoch(const tutti::data::interactions& data, std::uint64_t seed,
                             std::size_t epoch, std::size_t batch) {
  const auto order = tutti::shuffled_shards{}.shard(data.size(), 1, 0, seed, epoch).indices;
  std::vector<std::size_t> user_seen(static_cast<std::size_t>(data.n_users()), SIZE_MAX);
  std::vector<std::size_t> item_seen(static_cast<std::size_t>(data.n_items()), SIZE_MAX);
  double rows = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t step = k / batch;
    auto& u = user_seen[static_cast<std::size_t>(data.users[order[k]])];
    auto& i = item_seen[static_cast<std::size_t>(data.items[order[k]])];
    rows += (u != step) + (i != step);
    u = step;
    i = step;
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  CLI::App app{"tutti_bench_gpu_mf: MF training on the CUDA space, with a PyTorch twin"};
  std::int32_t learners = 170000, courses = 2000;
  double per_learner = 30;
  int dim = 64;
  std::size_t batch = 65536, epochs = 3;
  double lr = 0.01;
  float l2 = 1e-4f;
  std::string out, json;
  app.add_option("--learners", learners, "synthetic learners")->capture_default_str();
  app.add_option("--courses", courses, "synthetic courses")->capture_default_str();
  app.add_option("--per-learner", per_learner, "mean positives per learner")->capture_default_str();
  app.add_option("--dim", dim, "embedding dimension")->capture_default_str();
  app.add_option("--batch", batch, "batch")->capture_default_str();
  app.add_option("--epochs", epochs, "epochs (the first is reported as warm-up)")
      ->check(CLI::Range(std::size_t{2}, std::size_t{100}))
      ->capture_default_str();
  app.add_option("--lr", lr, "Adam learning rate")->capture_default_str();
  std::string optimizer = "adam";
  app.add_option("--optimizer", optimizer,
                 "adam (dense: every value each step, as PyTorch eager's Adam), or lazy-adam "
                 "(the row-sparse step: the touched rows only, replayed as a CUDA Graph, as "
                 "PyTorch's sparse embeddings + SparseAdam)")
      ->check(CLI::IsMember({"adam", "lazy-adam"}))
      ->capture_default_str();
  app.add_option("--out", out, "directory for the PyTorch twin's inputs (data, init, order)");
  app.add_option("--json", json, "write a JSON report");
  CLI11_PARSE(app, argc, argv);

  cudaStream_t stream = nullptr;
  int rc = 0;
  try {
    TUTTI_EXPECTS(tutti::cuda_device_count() > 0, "tutti_bench_gpu_mf", "no CUDA device visible");
    cudaDeviceProp prop{};
    TUTTI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    // The trainer's buffers are freed on this stream when it goes out of scope: the stream
    // must outlive it, so it is destroyed after the try block.
    TUTTI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_gbs = copy_bandwidth_gbs(stream);

    auto t0 = std::chrono::steady_clock::now();
    auto data = tutti::data::synthetic_courses({.learners = learners,
                                                .courses = courses,
                                                .interactions_per_learner = per_learner,
                                                .implicit = true,
                                                .seed = 42});
    const double gen_s = tutti::bench::seconds_since(t0);
    tutti::data::interactions none;
    none.user_ids = data.user_ids;
    none.item_ids = data.item_ids;
    none.implicit = true;

    using model_t = tutti::models::matrix_factorization<tutti::cuda_space>;
    tutti::cuda_space space(stream);
    model_t model({.dim = dim, .l2 = l2, .loss = tutti::loss_kind::logistic}, data.n_users(),
                  data.n_items(), space);
    const std::uint64_t seed = 7;
    const tutti::train_options options{.batch = batch,
                                       .epochs = epochs,
                                       .base_lr = lr,
                                       .seed = seed,
                                       .evaluate_each_epoch = false};
    // The trainer of either optimizer: its initial parameters, then its run.
    auto train = [&](auto opt, std::vector<float>& init) {
      tutti::trainer<model_t, tutti::shuffled_shards, tutti::single_rank, tutti::constant,
                     decltype(opt)>
          t(model, {}, {}, {}, opt, options);
      init = t.parameters_on_host();
      return t.fit(data, none);
    };
    std::vector<float> init;
    const bool lazy = optimizer == "lazy-adam";
    auto r = lazy ? train(tutti::lazy_adam{}, init) : train(tutti::adam{}, init);

    if (!out.empty()) {
      // The PyTorch twin starts from these exact parameters and visits the same batches.
      std::filesystem::create_directories(out);
      write_raw(out + "/users.i32", data.users);
      write_raw(out + "/items.i32", data.items);
      write_raw(out + "/labels.f32", data.labels);
      write_raw(out + "/init.f32", init);
      for (std::size_t e = 0; e < epochs; ++e)
        write_raw(out + "/order" + std::to_string(e) + ".u64",
                  tutti::shuffled_shards{}.shard(data.size(), 1, 0, seed, e).indices);
      nlohmann::json meta;
      meta["rows"] = data.size();
      meta["users"] = data.n_users();
      meta["items"] = data.n_items();
      meta["dim"] = dim;
      meta["batch"] = batch;
      meta["epochs"] = epochs;
      meta["lr"] = lr;
      meta["l2"] = l2;
      meta["segments"] = nlohmann::json::array();
      for (const auto& s : model.layout().segments())
        meta["segments"].push_back(
            {{"name", s.name}, {"offset", s.offset}, {"rows", s.rows}, {"cols", s.cols}});
      std::ofstream(out + "/meta.json") << meta.dump(2) << '\n';
    }

    // The bytes a step must move at least: the batch (ids, label), each sample's two embedding
    // rows and biases read and their gradients written, and the optimizer's pass: Adam's over the
    // arena (read p, g, m, v; write p, m, v), lazy Adam's over the rows the step touched (the
    // same seven, and the gradient row zeroed).
    const double arena = double(model.layout().total());
    const double per_sample = 12.0 + 2.0 * 2.0 * (dim + 1) * 4.0;
    const std::size_t steps = r.epochs.front().steps;
    auto min_bytes = [&](std::size_t epoch) {
      const double optimizer_bytes =
          lazy ? touched_rows_in_epoch(data, seed, epoch, batch) * (dim + 1) * 8 * 4
               : double(steps) * arena * 7 * 4;
      return double(data.size()) * per_sample + optimizer_bytes;
    };

    std::printf(
        "tutti_bench_gpu_mf on %s: %zu interactions, %d users, %d items, dim %d, batch %zu,"
        " %s lr %g%s\n",
        prop.name, data.size(), data.n_users(), data.n_items(), dim, batch,
        lazy ? "lazy Adam" : "Adam", lr, lazy ? " (the row-sparse step)" : "");
    std::printf("device-to-device copy: %.0f GB/s (read + write)\n\n", copy_gbs);
    std::printf("%6s  %10s  %12s  %14s  %10s  %9s  %10s\n", "epoch", "seconds", "train loss",
                "samples/s", "GB/s", "roofline", "host data s");
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& e : r.epochs) {
      const double min_bytes_per_epoch = min_bytes(e.epoch - 1);
      const double gbs = min_bytes_per_epoch / e.seconds / 1e9;
      std::printf("%6zu  %10.4f  %12.6f  %14.0f  %10.0f  %8.1f%%  %10.4f%s\n", e.epoch, e.seconds,
                  e.train_loss, e.samples_per_second, gbs, 100 * gbs / copy_gbs, e.phases.data,
                  e.epoch == 1 ? "  (warm-up)" : "");
      rows.push_back({{"epoch", e.epoch},
                      {"seconds", e.seconds},
                      {"train_loss", e.train_loss},
                      {"samples_per_s", e.samples_per_second},
                      {"min_gb_per_epoch", min_bytes_per_epoch / 1e9},
                      {"achieved_gbs", gbs},
                      {"roofline_share", gbs / copy_gbs},
                      {"host_data_seconds", e.phases.data}});
    }
    std::printf("\n(data generated on the host in %.1f s; not part of any figure)\n", gen_s);
    std::fflush(stdout);
    if (!json.empty()) {
      nlohmann::json j;
      j["benchmark"] = "gpu_mf";
      j["optimizer"] = optimizer;
      j["replayed_steps"] = r.replayed_steps;
      if (!r.step_graph_refused.empty()) j["step_graph_refused"] = r.step_graph_refused;
      j["gpu"] = prop.name;
      j["copy_gbs"] = copy_gbs;
      j["rows"] = data.size();
      j["dim"] = dim;
      j["batch"] = batch;
      j["results"] = rows;
      j["machine"] = tutti::bench::machine_json();
      j["date"] = tutti::bench::utc_now();
      std::ofstream(json) << j.dump(2) << '\n';
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_bench_gpu_mf: %s\n", e.what());
    rc = 1;
  }
  if (stream) cudaStreamDestroy(stream);
  return rc;
}
