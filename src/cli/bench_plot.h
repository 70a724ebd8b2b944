// `dsv4 bench --plot FILE.png`: the bench's results as one PNG chart, drawn with Cairo. Three panels:
// decode µs per layer against the layer's floor per batch (the ratio over each bar), the embedding +
// head time against the head's floor per batch, and prefill as a fraction of the FP8 peak per prompt
// length (with TFLOP/s and tok/s); the title names the model or preset, the layers, the device, the
// kernel tier(s) and the date. It reads the bench's JSON (`--json`, one tier, or `--kernels both`'s
// {"fast": ..., "exact": ..., "speedup": ...}); a panel whose rows are absent says so, rows without a
// field lose that bar, sections it does not know (e.g. speculative rows) are named in the footer.
// `--from-json FILE.json --plot FILE.png` re-plots a committed run without a GPU.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace dsv4::cli {

struct PlotRgb {
  uint8_t r, g, b;
};

// The series' fills: opaque and pixel-aligned, so that each bar is exactly its colour in the PNG (the
// tests find the bars by them). Index 0: the fast tier (or any tier not named "exact"), 1: exact.
struct BenchPlotPalette {
  PlotRgb decode[2];
  PlotRgb decode_floor;
  PlotRgb head[2];
  PlotRgb head_floor;
  PlotRgb prefill[2];
  PlotRgb peak;  // the track of the FP8 peak (100%) behind each prefill bar
};
inline constexpr BenchPlotPalette kBenchPlotPalette{
    .decode = {{31, 119, 180}, {84, 39, 143}},
    .decode_floor = {166, 198, 224},
    .head = {{230, 115, 0}, {140, 70, 20}},
    .head_floor = {253, 208, 162},
    .prefill = {{35, 139, 69}, {0, 90, 50}},
    .peak = {222, 226, 222},
};

// Draws `bench` (a `dsv4 bench --json` object) to the PNG `path`. The date in the title: bench's
// "date" when it has one, else today's (UTC; a live run's JSON carries none). Throws dsv4::Error, one
// line naming `path`, when there is nothing to plot (no decode or prefill rows), the file cannot be
// written, or this dsv4 was built without Cairo.
void write_bench_plot(const nlohmann::json& bench, const std::string& path);

// A saved bench JSON; "date" filled from the file name's leading YYYY-MM-DD when the JSON has none
// ("date not recorded" otherwise). Throws dsv4::Error (one line naming `path`) when unreadable or not JSON.
nlohmann::json read_bench_json(const std::string& path);

struct BenchPlotArgs {
  std::string plot;       // --plot FILE.png
  std::string from_json;  // --from-json FILE.json
  std::vector<const CLI::Option*> run_options;  // the options before these: --from-json refuses them
};

// Adds --plot (checked at parse time: a name ending in .png, and a build with Cairo) and --from-json
// (needs --plot) to `bench`; the options registered before them all shape a run, and --from-json refuses
// them (replot_bench_json).
void add_bench_plot_options(CLI::App& bench, BenchPlotArgs& args);
// After a run: draws `results` when --plot was given, and says where.
void plot_bench_results(const BenchPlotArgs& args, const nlohmann::json& results);
// --from-json: re-plots that file and returns true (nothing to run); false without --from-json.
bool replot_bench_json(const BenchPlotArgs& args);

}  // namespace dsv4::cli
