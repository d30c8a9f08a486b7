// SPDX-License-Identifier: Apache-2.0
// `tutti study large-batch`: where learning-rate scaling keeps a recommender's accuracy as the
// global batch grows, and where it stops. Trains MF and NCF on InstEval and the synthetic course
// data, or on the user's own file (--data), at each global batch under five recipes, several
// seeds per cell, a fixed epoch budget; prints a table per model x dataset, writes JSON and an
// SVG/HTML chart. See docs/large-batch.md. Its parts are in study/: the settings (config.hpp),
// the datasets (data.hpp), the runs and cells (cells.hpp), the chart (chart.hpp) and the reports
// (report.hpp).
#include "command.hpp"
#include "output_paths.hpp"
#include "study/report.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

namespace tutti::cli {
namespace {

constexpr const char* study_fn = "tutti study large-batch";

/// Whether option `name` was on the command line.
bool given(const study_config& c, const char* name) {
  return c.app && c.app->count(name) > 0;
}

/// `--quick`: a study of seconds, for every setting the command line left out.
void apply_quick(study_config& c) {
  if (!given(c, "--datasets")) c.datasets = {"synthetic"};
  if (!given(c, "--learners")) c.learners = 500;
  if (!given(c, "--courses")) c.courses = 100;
  if (!given(c, "--batches")) c.batches = {64, 256};
  if (!given(c, "--reference-batch")) c.reference_batch = 64;
  if (!given(c, "--epochs")) c.epochs = 3;
  if (!given(c, "--layers")) c.layers = {16, 8};
  if (!given(c, "--gmf-dim")) c.gmf_dim = 8;
  if (!given(c, "--dim")) c.dim = 16;
  if (!given(c, "--tune-lrs")) c.tune_lrs = {0.003, 0.01};
  if (!given(c, "--tune-lamb-lrs")) c.tune_lamb_lrs = {0.01, 0.03};
}

/// The checks of the data options: a file or the built-in datasets, and the file's options only
/// with a file.
void check_data_options(const study_config& c) {
  const bool from_file = !c.file.path.empty();
  TUTTI_EXPECTS(!from_file || !given(c, "--datasets"), study_fn,
                "--data " + c.file.path +
                    " and --datasets: the study runs on your file or on the built-in datasets, "
                    "not both; expected one of --data and --datasets");
  for (const char* o : {"--user-col", "--item-col", "--label-col", "--timestamp-col", "--implicit",
                        "--ids", "--clean", "--quarantine", "--label-min", "--label-max",
                        "--duplicates", "--max-rejected-share"})
    TUTTI_EXPECTS(from_file || !given(c, o), study_fn,
                  std::string(o) +
                      " describes the file of --data, and no --data was given; "
                      "expected --data FILE with it");
}

/// The checks of the batches, the warmup and the lists.
void check_study_settings(const study_config& c) {
  using tutti::detail::sfmt;
  // A global batch need not be a multiple of the ranks (each takes ceil(B/W) or floor(B/W)
  // samples a step), but every rank needs at least one.
  const auto ranks = static_cast<std::size_t>(c.ranks);
  for (const std::size_t b : c.batches)
    TUTTI_EXPECTS(b >= ranks, study_fn,
                  "--batches: " + std::to_string(b) + " is below --ranks " +
                      std::to_string(c.ranks) +
                      "; expected global batches of at least one sample per rank");
  TUTTI_EXPECTS(c.reference_batch >= ranks, study_fn,
                "--reference-batch " + std::to_string(c.reference_batch) + " is below --ranks " +
                    std::to_string(c.ranks) +
                    "; expected at least one sample per rank (the rates are tuned there)");
  TUTTI_EXPECTS(c.warmup_epochs < double(c.epochs), study_fn,
                sfmt("--warmup-epochs %g is not below --epochs %zu; expected a warmup shorter "
                     "than the run",
                     c.warmup_epochs, c.epochs));
  TUTTI_EXPECTS(!c.models.empty() && !c.datasets.empty() && !c.recipes.empty() &&
                    !c.tune_lrs.empty() && !c.tune_lamb_lrs.empty(),
                study_fn,
                "--models, --datasets, --recipes, --tune-lrs and --tune-lamb-lrs need at least "
                "one entry each");
}

/// Loads every dataset; one that is not on this machine is skipped and said.
void load_datasets(const study_config& c, detail::study_outcome& o) {
  for (const auto& name : c.datasets) {
    auto d = detail::load_study_data(c, name);
    if (!d) {
      o.skipped.push_back("dataset insteval: no insteval.tsv in " + c.datasets_dir +
                          " (see --datasets-dir)");
      std::fprintf(stderr, "tutti study: skipping %s\n", o.skipped.back().c_str());
      continue;
    }
    o.data.push_back(std::move(*d));
  }
  for (const auto& m : c.models) {
    if (!model_available(*choice_named<model_choice>(m))) {
      o.skipped.push_back("model " + m +
                          ": this tutti was built without a CBLAS (neural_cf "
                          "needs one)");
      std::fprintf(stderr, "tutti study: skipping %s\n", o.skipped.back().c_str());
      continue;
    }
    o.models.push_back(m);
  }
}

/// The lines above the tables: the date, the command, the datasets and the size of the study.
void print_study_header(const study_config& c, const detail::study_outcome& o,
                        std::size_t total_cells) {
  std::printf("tutti study large-batch (%s)\n  %s\n", o.date.c_str(),
              detail::study_command_line(c).c_str());
  for (const auto& d : o.data) {
    std::printf("  %s\n", detail::dataset_line(d).c_str());
    if (d.cleaning) {
      std::printf("    cleaning: read %zu rows, used %zu, rejected %zu", d.cleaning->rows_read,
                  d.cleaning->rows_used, d.cleaning->rows_rejected);
      for (const auto& [reason, n] : d.cleaning->rejected)
        if (n) std::printf(", %s %zu", reason.c_str(), n);
      std::printf("\n");
    }
  }
  std::printf("  %zu cells x %zu seeds, %zu epochs each, %d rank(s)\n\n", total_cells, c.seeds,
              c.epochs, c.ranks);
  std::fflush(stdout);
}

/// The panels of the study: one per model x dataset, each tuned, run and compared.
class study_panels {
 public:
  study_panels(const study_config& c, detail::study_outcome& o,
               std::vector<detail::study_recipe> recipes)
      : m_c(c),
        m_o(o),
        m_recipes(std::move(recipes)),
        m_total(o.models.size() * o.data.size() * c.batches.size() * m_recipes.size()) {}
  std::size_t total_cells() const { return m_total; }

  /// Runs every panel.
  void run() {
    for (const auto& model : m_o.models)
      for (const auto& d : m_o.data) {
        const loss_kind loss = d.implicit ? loss_kind::logistic : loss_kind::squared;
        const model_settings m{.name = *choice_named<model_choice>(model),
                               .dim = m_c.dim,
                               .gmf_dim = m_c.gmf_dim,
                               .layers = m_c.layers,
                               .l2 = m_c.l2};
        with_model<host_space>(m, d.all.n_users(), d.all.n_items(), loss, study_fn, [&](auto make) {
          const float mean = d.mean;
          panel(model, d,
                detail::study_runner(m_c, [make, mean](host_space s) { return make(s, mean); }));
        });
      }
  }

 private:
  bool uses(optimizer_choice optimizer) const {
    return std::any_of(m_recipes.begin(), m_recipes.end(),
                       [&](const auto& r) { return r.optimizer == optimizer; });
  }

  /// One panel: tune the base rates at the reference batch, then every batch x recipe x seed.
  template <class Run>
  void panel(const std::string& model, const detail::study_data& d, Run run) {
    std::vector<detail::study_trial> trials;
    const double base_lr =
        m_c.base_lr ? *m_c.base_lr
        : uses(optimizer_choice::adam)
            ? detail::tune_rate(m_c, d, run, detail::recipe_named("same"), m_c.tune_lrs, trials)
            : 0.0;
    const double lamb_lr = m_c.lamb_lr ? *m_c.lamb_lr
                           : uses(optimizer_choice::lamb)
                               ? detail::tune_rate(m_c, d, run, detail::recipe_named("lamb"),
                                                   m_c.tune_lamb_lrs, trials)
                               : 0.0;
    std::fprintf(stderr, "%s on %s: base rates at batch %zu: adam %g, lamb %g\n", model.c_str(),
                 d.name.c_str(), m_c.reference_batch, base_lr, lamb_lr);
    const std::size_t first = m_o.cells.size();
    for (const std::size_t batch : m_c.batches)
      for (const auto& recipe : m_recipes)
        m_o.cells.push_back(cell(model, d, run, batch, recipe,
                                 recipe.optimizer == optimizer_choice::lamb ? lamb_lr : base_lr));
    compare(model, d, first, base_lr, lamb_lr);
    m_o.tuning.push_back(std::move(trials));
  }

  /// One cell: every seed of `recipe` at `batch` from base rate `base`.
  template <class Run>
  detail::study_cell cell(const std::string& model, const detail::study_data& d, Run& run,
                          std::size_t batch, const detail::study_recipe& recipe, double base) {
    detail::study_cell cell;
    cell.model = model;
    cell.dataset = d.name;
    cell.batch = batch;
    cell.recipe = recipe;
    cell.metric = d.metric;
    for (std::size_t s = 0; s < m_c.seeds; ++s) {
      cell.seeds.push_back(m_c.first_seed + s);
      cell.runs.push_back(run(d.parts, d.test_eval, batch, recipe, base, m_c.first_seed + s));
    }
    detail::summarize(cell);
    ++m_done;
    std::fprintf(stderr, "[%zu/%zu] %s %s batch %zu %s: %s %s +- %.4f (%.1f s)\n", m_done, m_total,
                 model.c_str(), d.name.c_str(), batch, recipe.name.c_str(), d.metric,
                 detail::metric_text(cell.mean).c_str(), cell.stdev, cell.seconds);
    for (const auto& r : cell.runs)
      if (!r.failure.empty())
        std::fprintf(stderr, "  a seed stopped early: %s\n", r.failure.c_str());
    std::fflush(stderr);
    return cell;
  }

  /// The panel's baseline, recipe `same` (or the first recipe listed) at the smallest batch,
  /// and each of the panel's cells (from `first`) compared with it; prints the panel's table.
  void compare(const std::string& model, const detail::study_data& d, std::size_t first,
               double base_lr, double lamb_lr) {
    const std::string base_recipe =
        std::find(m_c.recipes.begin(), m_c.recipes.end(), "same") != m_c.recipes.end()
            ? "same"
            : m_c.recipes.front();
    detail::study_baseline b{model, d.name,    base_recipe, d.metric, m_c.batches.front(),
                             0.0,   d.trivial, base_lr,     lamb_lr,  m_c.tolerance};
    auto& cells = m_o.cells;
    for (std::size_t i = first; i < cells.size(); ++i)
      if (cells[i].batch == b.batch && cells[i].recipe.name == base_recipe) b.value = cells[i].mean;
    for (std::size_t i = first; i < cells.size(); ++i)
      detail::compare_to_baseline(cells[i], b.value, m_c.tolerance);
    m_o.baselines.push_back(b);
    std::printf("%s\n", detail::panel_table(b, cells).c_str());
    std::fflush(stdout);
  }

  const study_config& m_c;
  detail::study_outcome& m_o;
  std::vector<detail::study_recipe> m_recipes;
  std::size_t m_total;
  std::size_t m_done = 0;
};

/// Runs `tutti study large-batch`; returns the process exit code.
int run_study_large_batch(study_config& c) {
  const auto start = std::chrono::steady_clock::now();
  detail::study_outcome o;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  o.date = date;
  check_data_options(c);
  if (c.quick) apply_quick(c);
  if (!c.file.path.empty()) c.datasets = {detail::file_dataset_name(c.file.path)};
  std::sort(c.batches.begin(), c.batches.end());
  c.batches.erase(std::unique(c.batches.begin(), c.batches.end()), c.batches.end());
  check_study_settings(c);
  check_outputs("tutti study", {{"--json", c.json}},
                {{{"--report", c.report}, {"large-batch.html", "large-batch.svg"}}},
                {{"--data", c.file.path}});
  std::vector<detail::study_recipe> recipes;  // an unknown recipe stops here, before any data
  for (const auto& r : c.recipes) recipes.push_back(detail::recipe_named(r));

  load_datasets(c, o);
  study_panels panels(c, o, std::move(recipes));
  print_study_header(c, o, panels.total_cells());
  panels.run();
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu cells, %zu runs in %.0f s\n", o.cells.size(), o.cells.size() * c.seeds,
              o.seconds);
  if (!c.report.empty()) detail::write_study_page(c, o);
  if (!c.json.empty()) detail::write_study_json(c, o);
  return 0;
}

}  // namespace

std::unique_ptr<command> make_study_command(CLI::App& app) {
  return make_configured<study_config>(app, add_study_commands, run_study_large_batch);
}

}  // namespace tutti::cli
