// dsv4 bench --plot / --from-json (cli/bench_plot.h): the committed bench JSONs of docs/bench re-plotted
// without a GPU. The PNG is checked as a file (signature, IHDR size, Cairo decodes it to that size) and
// as a chart: each series' bars are found by their fill colour, and their heights (prefill: lengths on
// the peak's track) must be proportional to the JSON's numbers, within a pixel of rounding. Absent and
// unknown sections, bad paths and bad JSON give a plot or one error line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#if DSV4_HAVE_CAIRO
#include <cairo.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "cli/bench_plot.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using cli::kBenchPlotPalette;
using cli::PlotRgb;
using nlohmann::json;

std::string bench_json(const std::string& name) { return test::source_dir() + "/docs/bench/" + name; }

// `dsv4 bench ARGS`: exit code and stderr (stdout discarded).
test::CommandResult bench(const std::string& args) {
  std::string cmd = test::dsv4_binary();  // a subshell: run_command's own 2>&1 applies to it, not to dsv4
  cmd += " bench " + args + " 2>&1 >/dev/null </dev/null";
  return test::run_command("(" + cmd + ")");
}

void expect_one_error_line(const std::string& args, const std::string& line) {
  const auto r = bench(args);
  EXPECT_EQ(r.exit_code, 1) << "dsv4 bench " << args << "\n" << r.output;
  EXPECT_EQ(r.output, line + "\n") << "dsv4 bench " << args;
}

#if DSV4_HAVE_CAIRO

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("dsv4-plot-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

json load(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::string save(const TempDir& d, const std::string& name, const json& j) {
  const std::string p = d.file(name);
  std::ofstream(p) << j.dump(2);
  return p;
}

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

struct Image {
  int w = 0, h = 0;
  std::vector<uint32_t> px;  // 0x00RRGGBB
  bool is(int x, int y, PlotRgb c) const {
    return px[size_t(y) * size_t(w) + size_t(x)] == (uint32_t(c.r) << 16 | uint32_t(c.g) << 8 | c.b);
  }
  bool has(PlotRgb c) const {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        if (is(x, y, c)) return true;
    return false;
  }
};

// Checks the PNG as a file, then decodes it with Cairo.
Image read_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Image im;
  EXPECT_GE(bytes.size(), 33u) << path;
  if (bytes.size() < 33) return im;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << path;
  EXPECT_EQ(be32(bytes, 8), 13u) << "IHDR length";
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  const uint32_t w = be32(bytes, 16), h = be32(bytes, 20);
  EXPECT_GT(w, 0u);
  EXPECT_GT(h, 0u);
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  EXPECT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS) << path;
  if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
    im.w = cairo_image_surface_get_width(s);
    im.h = cairo_image_surface_get_height(s);
    EXPECT_EQ(uint32_t(im.w), w);
    EXPECT_EQ(uint32_t(im.h), h);
    const int stride = cairo_image_surface_get_stride(s);
    const unsigned char* data = cairo_image_surface_get_data(s);
    im.px.resize(size_t(im.w) * size_t(im.h));
    for (int y = 0; y < im.h; ++y)
      for (int x = 0; x < im.w; ++x) {
        uint32_t v;
        std::memcpy(&v, data + size_t(y) * size_t(stride) + size_t(x) * 4, 4);
        im.px[size_t(y) * size_t(im.w) + size_t(x)] = v & 0xFFFFFF;
      }
  }
  cairo_surface_destroy(s);
  return im;
}

Image plot_of(const TempDir& d, const std::string& json_path) {
  const std::string png = d.file("plot.png");
  fs::remove(png);
  const auto r = bench("--from-json " + json_path + " --plot " + png);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_png(png);
}

// A committed bench JSON of docs/bench and its plot.
struct Plotted {
  json j;
  Image im;
};
Plotted plot_committed(const TempDir& d, const std::string& name) {
  const std::string path = bench_json(name);
  return {load(path), plot_of(d, path)};
}

// The vertical bars of colour c standing on the baseline most of its columns share (legend swatches
// stand elsewhere): left to right, their heights in pixels.
std::vector<int> bar_heights(const Image& im, PlotRgb c) {
  std::map<int, std::vector<std::pair<int, int>>> by_bottom;  // bottom row -> (x, run height)
  for (int x = 0; x < im.w; ++x)
    for (int y = 0; y < im.h; ++y) {
      if (!im.is(x, y, c)) continue;
      const int top = y;
      while (y + 1 < im.h && im.is(x, y + 1, c)) ++y;
      by_bottom[y].push_back({x, y - top + 1});
    }
  if (by_bottom.empty()) return {};
  const auto base = std::max_element(by_bottom.begin(), by_bottom.end(),
                                     [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  std::vector<int> heights;
  int last_x = -2;
  for (const auto& [x, h] : base->second) {
    if (x != last_x + 1) heights.push_back(h);
    heights.back() = std::max(heights.back(), h);
    last_x = x;
  }
  return heights;
}

// One series' bars and the numbers they stand for.
struct Measured {
  std::vector<int> heights;
  std::vector<double> values;
};

// The bars of all `series` share one scale: pixels = value x (tallest bar / its value), to a pixel.
void expect_proportional(const std::vector<Measured>& series) {
  double vmax = 0;
  int hmax = 0;
  for (const Measured& s : series) {
    ASSERT_EQ(s.heights.size(), s.values.size());
    for (size_t i = 0; i < s.values.size(); ++i)
      if (s.values[i] > vmax) vmax = s.values[i], hmax = s.heights[i];
  }
  ASSERT_GT(hmax, 100) << "the tallest bar is too short to measure";
  for (const Measured& s : series)
    for (size_t i = 0; i < s.values.size(); ++i)
      EXPECT_NEAR(s.heights[i], s.values[i] * hmax / vmax, 1.5) << "bar " << i << " of value " << s.values[i];
}

std::vector<double> column(const json& rows, const char* key) {
  std::vector<double> v;
  for (const json& r : rows) v.push_back(r.at(key).get<double>());
  return v;
}

// Each prefill bar of colour c, top to bottom: its length and its track's (the bar plus the peak's
// colour right of it), in pixels, measured on the bar's first pixel row.
struct OnTrack {
  int bar, track;
};
std::vector<OnTrack> prefill_bars(const Image& im, PlotRgb c) {
  std::vector<OnTrack> bars;
  bool in_bar = false;
  for (int y = 0; y < im.h; ++y) {
    int x = 0;
    while (x < im.w && !im.is(x, y, c)) ++x;
    const bool found = x < im.w;
    if (found && !in_bar) {
      int a = 0, b = 0;
      while (x < im.w && im.is(x, y, c)) ++a, ++x;
      while (x < im.w && im.is(x, y, kBenchPlotPalette.peak)) ++b, ++x;
      bars.push_back({a, a + b});
    }
    in_bar = found;
  }
  return bars;
}

// The bars' lengths are these fractions of their tracks, to a pixel.
void expect_fractions(const std::vector<OnTrack>& bars, const std::vector<double>& want) {
  ASSERT_EQ(bars.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_GT(bars[i].track, 100) << "bar " << i;
    EXPECT_NEAR(bars[i].bar, want[i] * bars[i].track, 1.0) << "bar " << i;
  }
}

TEST(BenchPlot, OneTierDecodeAndHeadBarsFollowTheJson) {
  TempDir d;
  const auto [j, im] = plot_committed(d, "2026-12-01-flash20-fast-r2.json");
  ASSERT_GT(im.w, 0);
  const auto& p = kBenchPlotPalette;
  expect_proportional({{bar_heights(im, p.decode[0]), column(j["decode"], "layer_us")},
                       {bar_heights(im, p.decode_floor), column(j["decode"], "layer_floor_us")}});
  expect_proportional({{bar_heights(im, p.head[0]), column(j["decode"], "embed_head_us")},
                       {bar_heights(im, p.head_floor), column(j["decode"], "head_floor_us")}});
  EXPECT_FALSE(im.has(p.decode[1])) << "one tier (fast): no exact bars";
  EXPECT_FALSE(im.has(p.prefill[0])) << "this run has no prefill rows";
}

TEST(BenchPlot, BothTiersShareTheScaleAndPrefillIsAFractionOfThePeak) {
  TempDir d;
  const auto [j, im] = plot_committed(d, "2026-12-02-final-20layers-both.json");
  ASSERT_GT(im.w, 0);
  const auto& p = kBenchPlotPalette;
  const json &f = j["fast"], &e = j["exact"];
  expect_proportional({{bar_heights(im, p.decode[0]), column(f["decode"], "layer_us")},
                       {bar_heights(im, p.decode[1]), column(e["decode"], "layer_us")},
                       {bar_heights(im, p.decode_floor), column(f["decode"], "layer_floor_us")}});
  expect_proportional({{bar_heights(im, p.head[0]), column(f["decode"], "embed_head_us")},
                       {bar_heights(im, p.head[1]), column(e["decode"], "embed_head_us")}});
  expect_fractions(prefill_bars(im, p.prefill[0]), column(f["prefill"], "of_fp8_peak"));
  expect_fractions(prefill_bars(im, p.prefill[1]), column(e["prefill"], "of_fp8_peak"));
}

TEST(BenchPlot, AbsentAndUnknownSectionsStillPlot) {
  TempDir d;
  const auto& p = kBenchPlotPalette;
  json j = load(bench_json("2026-12-01-flash20-fast.json"));
  const std::vector<double> fraction = column(j["prefill"], "of_fp8_peak");
  j.erase("decode");  // prefill only
  Image im = plot_of(d, save(d, "prefill-only.json", j));
  ASSERT_GT(im.w, 0);
  EXPECT_FALSE(im.has(p.decode[0]));
  EXPECT_FALSE(im.has(p.head[0]));
  expect_fractions(prefill_bars(im, p.prefill[0]), fraction);

  // A section the plot does not know (rows another bench mode adds) and rows missing fields.
  json k = load(bench_json("2026-12-01-flash20-fast-r2.json"));
  k["speculative"] = json::array({{{"batch", 1}, {"tok_s", 400.0}, {"accepted", 0.6}}});
  k["decode"][1].erase("layer_floor_us");
  k["decode"][1].erase("layer_ratio");
  im = plot_of(d, save(d, "unknown.json", k));
  ASSERT_GT(im.w, 0);
  EXPECT_EQ(bar_heights(im, p.decode[0]).size(), 4u);
  EXPECT_EQ(bar_heights(im, p.decode_floor).size(), 3u) << "the row without a floor loses its floor bar";

  // Nothing to plot: one line naming the file, no PNG.
  json none = k;
  none.erase("decode");
  const std::string empty = save(d, "empty.json", none), png = d.file("none.png");
  expect_one_error_line("--from-json " + empty + " --plot " + png,
                        "dsv4: error: " + png + ": nothing to plot: the bench JSON has no decode or prefill rows");
  EXPECT_FALSE(fs::exists(png));
}

TEST(BenchPlot, BadPathsAndFilesAreOneErrorLine) {
  TempDir d;
  const std::string r2 = bench_json("2026-12-01-flash20-fast-r2.json");
  expect_one_error_line("--from-json " + r2 + " --plot out.jpg",
                        "dsv4: error: --plot: expected a file name ending in .png, got 'out.jpg'");
  expect_one_error_line("--preset flash --dummy-weights --plot out",
                        "dsv4: error: --plot: expected a file name ending in .png, got 'out'");
  const std::string missing_dir = d.file("no/such/dir/x.png");
  expect_one_error_line("--from-json " + r2 + " --plot " + missing_dir,
                        "dsv4: error: " + missing_dir + ": cannot write the plot (No such file or directory)");
  fs::create_directories(d.file("adir.png"));
  expect_one_error_line("--from-json " + r2 + " --plot " + d.file("adir.png"),
                        "dsv4: error: " + d.file("adir.png") + ": cannot write the plot (Is a directory)");
  expect_one_error_line("--from-json " + r2, "dsv4: error: dsv4 bench: --from-json requires --plot");
  expect_one_error_line("--from-json " + d.file("nope.json") + " --plot " + d.file("x.png"),
                        "dsv4: error: --from-json: no such file '" + d.file("nope.json") + "'");
  expect_one_error_line("--from-json " + r2 + " --plot " + d.file("x.png") + " --preset flash",
                        "dsv4: error: --from-json cannot be used with --preset (it re-plots a run, it runs nothing)");
  const std::string jsonl = bench_json("2026-12-01-moe-decode.json");  // one JSON object a line
  const auto r = bench("--from-json " + jsonl + " --plot " + d.file("x.png"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.rfind("dsv4: error: " + jsonl + ": not a JSON file (", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(fs::exists(d.file("x.png")));
}

#else  // a build without Cairo: --plot says so at parse time

TEST(BenchPlot, BuildWithoutCairoRefusesThePlotFlag) {
  expect_one_error_line("--from-json " + bench_json("2026-12-01-flash20-fast-r2.json") + " --plot x.png",
                        "dsv4: error: --plot: this dsv4 was built without Cairo (libcairo2-dev): it cannot plot");
}

#endif

}  // namespace
}  // namespace dsv4
