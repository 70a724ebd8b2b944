// The bench chart (bench_plot.h): the JSON is read into a PlotModel (titles, bar series, prefill
// rows, footer lines), then drawn; reading needs no Cairo, drawing does.
#include "cli/bench_plot.h"

#include <CLI/CLI.hpp>
#if DSV4_HAVE_CAIRO
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;

// ---- Reading the bench JSON.

std::optional<double> num(const json& row, const char* key) {
  if (!row.is_object()) return std::nullopt;
  const auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string str(const json& o, const char* key) {
  if (!o.is_object()) return "";
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

// o[key] when it is an array of rows, else an empty one.
const json& rows(const json& o, const char* key) {
  static const json none = json::array();
  if (!o.is_object()) return none;
  const auto it = o.find(key);
  return it != o.end() && it->is_array() ? *it : none;
}

bool is_tier(const json& o) {
  return o.is_object() && ((o.contains("decode") && o["decode"].is_array()) ||
                           (o.contains("prefill") && o["prefill"].is_array()));
}

// One tier's results: the object itself (one --kernels tier), or each member that is one
// (`--kernels both`): fast first, then exact, then any other, by name.
struct Tier {
  std::string name;  // "fast", "exact", or the object's "kernels"
  const json* j;
  int colour;  // palette index: 1 for exact, else 0
};

std::vector<Tier> tiers_of(const json& bench) {
  std::vector<Tier> t;
  if (is_tier(bench)) {
    t.push_back({str(bench, "kernels"), &bench, 0});
  } else if (bench.is_object()) {
    for (const auto& [k, v] : bench.items())
      if (is_tier(v)) t.push_back({k, &v, 0});
    const auto rank = [](const std::string& n) { return n == "fast" ? 0 : n == "exact" ? 1 : 2; };
    std::stable_sort(t.begin(), t.end(), [&](const Tier& a, const Tier& b) { return rank(a.name) < rank(b.name); });
  }
  for (Tier& x : t) x.colour = x.name == "exact" ? 1 : 0;
  return t;
}

std::optional<std::string> recorded_date(const json& bench) {
  if (const std::string d = str(bench, "date"); !d.empty()) return d;
  for (const Tier& t : tiers_of(bench))
    if (const std::string d = str(*t.j, "date"); !d.empty()) return d;
  return std::nullopt;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// ---- Numbers as the chart prints them.

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string grouped(double v) {  // 1611.5 -> "1,612"
  std::string s = fixed(std::fabs(v), 0), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string fmt_us(double v) { return std::fabs(v) >= 100 ? grouped(v) : fixed(v, 1); }
std::string fmt_ratio(double r) { return fixed(r, r < 10 ? 2 : 1) + "x"; }
std::string fmt_rate(double v) {  // 14717.8 -> "14.7K"
  if (v >= 1e6) return fixed(v / 1e6, 2) + "M";
  if (v >= 1e4) return fixed(v / 1e3, 1) + "K";
  return grouped(v);
}

// ---- What the chart shows.

struct Bar {
  std::optional<double> value, ratio;  // ratio: annotated over the bar (achieved / floor)
};
struct BarSeries {
  std::string name;
  PlotRgb colour;
  std::vector<Bar> bars;  // one a group
};
struct BarChart {
  std::string title, axis, empty;  // empty: said in the panel when it has no bars
  std::vector<std::string> groups;
  std::vector<BarSeries> series;
};
struct PeakRow {
  std::string label, note;
  PlotRgb colour;
  double fraction;  // of the peak
};
struct PeakChart {
  std::string title, axis, empty;
  std::vector<PeakRow> rows;
};
struct PlotModel {
  std::string title, subtitle;
  BarChart decode, head;
  PeakChart prefill;
  std::vector<std::string> footer;
};

// Keys of the bench JSON that the chart shows or that need no place in it.
const std::set<std::string> kTierKeys = {"device", "model", "layers", "moe_prefill", "kernels", "weights_device_bytes",
                                         "free_bytes", "ceilings", "prefill", "decode", "context_fill", "command",
                                         "date", "commit", "speedup_vs_exact"};
const std::set<std::string> kTopKeys = {"speedup", "command", "date", "commit"};

// Achieved vs floor per decode row (batch, context), one series a tier and the floor last: the floors
// are the tier-independent bytes and FLOPs, so the first tier's.
BarChart decode_bars(const std::vector<Tier>& tiers, const char* achieved, const char* floor, const char* ratio,
                     const PlotRgb (&colours)[2], PlotRgb floor_colour) {
  std::set<std::pair<double, double>> keys;  // (context, batch)
  for (const Tier& t : tiers)
    for (const json& r : rows(*t.j, "decode"))
      if (const auto b = num(r, "batch")) keys.insert({num(r, "context").value_or(0), *b});
  BarChart c;
  const std::vector<std::pair<double, double>> k(keys.begin(), keys.end());
  const bool one_context = k.empty() || k.front().first == k.back().first;
  for (const auto& [ctx, b] : k) c.groups.push_back("batch " + grouped(b) + (one_context ? "" : ", ctx " + grouped(ctx)));
  const auto row_of = [&](const Tier& t, size_t g) -> const json* {
    for (const json& r : rows(*t.j, "decode"))
      if (num(r, "batch") == k[g].second && num(r, "context").value_or(0) == k[g].first) return &r;
    return nullptr;
  };
  BarSeries fl{"floor", floor_colour, std::vector<Bar>(k.size())};
  for (const Tier& t : tiers) {
    BarSeries s{t.name.empty() ? "achieved" : t.name, colours[t.colour], std::vector<Bar>(k.size())};
    for (size_t g = 0; g < k.size(); ++g) {
      const json* r = row_of(t, g);
      if (!r) continue;
      const auto v = num(*r, achieved), f = num(*r, floor);
      s.bars[g] = {v, num(*r, ratio)};
      if (v && f && *f > 0 && !s.bars[g].ratio) s.bars[g].ratio = *v / *f;
      if (!fl.bars[g].value) fl.bars[g].value = f;
    }
    c.series.push_back(std::move(s));
  }
  c.series.push_back(std::move(fl));
  std::erase_if(c.series, [](const BarSeries& s) {
    return std::none_of(s.bars.begin(), s.bars.end(), [](const Bar& b) { return b.value.has_value(); });
  });
  return c;
}

PeakChart prefill_rows(const std::vector<Tier>& tiers, double fp8_peak) {
  PeakChart c;
  std::vector<std::pair<double, PeakRow>> rs;
  for (const Tier& t : tiers)
    for (const json& r : rows(*t.j, "prefill")) {
      const auto tokens = num(r, "tokens"), tflops = num(r, "tflops"), tok_s = num(r, "tok_s");
      std::optional<double> f = num(r, "of_fp8_peak");
      if (!f && tflops && fp8_peak > 0) f = *tflops / fp8_peak;
      if (!tokens || !f) continue;
      std::string note = fixed(100 * *f, 1) + "%";
      if (tflops) note += "  ·  " + fixed(*tflops, 0) + " TFLOP/s";
      if (tok_s) note += "  ·  " + fmt_rate(*tok_s) + " tok/s";
      const std::string label = grouped(*tokens) + " tok" + (tiers.size() > 1 ? " " + t.name : "");
      rs.push_back({*tokens, {label, note, kBenchPlotPalette.prefill[t.colour], *f}});
    }
  std::stable_sort(rs.begin(), rs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& r : rs) c.rows.push_back(std::move(r.second));
  return c;
}

std::vector<std::string> footer_of(const json& bench, const std::vector<Tier>& tiers) {
  std::vector<std::string> f;
  for (const Tier& t : tiers) {
    const json cf = t.j->value("context_fill", json());
    const auto slots = num(cf, "slots"), tokens = num(cf, "tokens"), ms = num(cf, "ms");
    if (slots && tokens && ms && *ms > 0)
      f.push_back("context fill" + (tiers.size() > 1 ? " (" + t.name + ")" : "") + ": " + grouped(*slots) +
                  " slots × " + grouped(*tokens) + " tokens in " + fixed(*ms / 1e3, 2) + " s (" +
                  fmt_rate(*slots * *tokens / (*ms / 1e3)) + " tok/s)");
  }
  const json& sp = !rows(bench, "speedup").empty() || tiers.empty() ? rows(bench, "speedup")
                                                                    : rows(*tiers.front().j, "speedup_vs_exact");
  std::string s;
  for (const json& r : sp)
    if (const auto b = num(r, "batch"), l = num(r, "layer"); b && l)
      s += (s.empty() ? "" : ",  ") + fmt_ratio(*l) + " at batch " + grouped(*b);
  if (!s.empty()) f.push_back("exact / fast time per layer: " + s);
  std::set<std::string> unknown;
  const bool one = tiers.size() == 1 && tiers.front().j == &bench;
  for (const auto& [k, v] : bench.items())
    if (!(one ? kTierKeys : kTopKeys).contains(k) && !(!one && is_tier(v))) unknown.insert(k);
  for (const Tier& t : tiers)
    for (const auto& [k, v] : t.j->items())
      if (!kTierKeys.contains(k)) unknown.insert(k);
  if (!unknown.empty()) {
    std::string u;
    for (const std::string& k : unknown) u += (u.empty() ? "" : ", ") + k;
    f.push_back("in the JSON, not plotted: " + u);
  }
  std::string cmd = str(bench, "command"), commit = str(bench, "commit");
  if (cmd.empty() && !tiers.empty()) cmd = str(*tiers.front().j, "command");
  if (commit.empty() && !tiers.empty()) commit = str(*tiers.front().j, "commit");
  if (!cmd.empty() || !commit.empty())
    f.push_back((cmd.empty() ? "" : "command: " + cmd) + (commit.empty() ? "" : "   (commit " + commit + ")"));
  return f;
}

PlotModel plot_model(const json& bench, const std::string& path) {
  const std::vector<Tier> tiers = tiers_of(bench);
  const bool any_rows = std::any_of(tiers.begin(), tiers.end(), [](const Tier& t) {
    return !rows(*t.j, "decode").empty() || !rows(*t.j, "prefill").empty();
  });
  if (!any_rows) fail(path, ": nothing to plot: the bench JSON has no decode or prefill rows");
  const json& first = *tiers.front().j;
  const json ceil = first.value("ceilings", json::object());
  const double fp8 = num(ceil, "fp8_TFLOPs").value_or(0);

  PlotModel m;
  std::string kernels;
  for (const Tier& t : tiers) kernels += (kernels.empty() ? "" : " + ") + (t.name.empty() ? "?" : t.name);
  m.title = "dsv4 bench  ·  " + (str(first, "model").empty() ? "model not recorded" : str(first, "model"));
  if (const auto l = num(first, "layers")) m.title += "  ·  " + grouped(*l) + " layers";
  if (const std::string d = str(first, "device"); !d.empty()) m.title += "  ·  " + d;
  m.title += "  ·  " + kernels + " kernels  ·  " + recorded_date(bench).value_or(today_utc());
  std::string sub;
  if (const auto h = num(ceil, "hbm_GBs")) sub += grouped(*h) + " GB/s HBM";
  if (fp8 > 0) sub += (sub.empty() ? "" : ", ") + grouped(fp8) + " FP8";
  if (const auto b = num(ceil, "bf16_TFLOPs")) sub += (fp8 > 0 ? " / " : sub.empty() ? "" : ", ") + grouped(*b) + " bf16";
  if (!sub.empty()) sub = "ceilings: " + sub + (fp8 > 0 || num(ceil, "bf16_TFLOPs") ? " TFLOP/s" : "");
  if (const auto w = num(first, "weights_device_bytes"))
    sub += (sub.empty() ? "" : "   ·   ") + fixed(*w / double(1ull << 30), 1) + " GiB of weights on the device";
  if (const std::string mp = str(first, "moe_prefill"); !mp.empty())
    sub += (sub.empty() ? "" : "   ·   ") + std::string("MoE prefill ") + mp;
  m.subtitle = sub;

  const auto& p = kBenchPlotPalette;
  m.decode = decode_bars(tiers, "layer_us", "layer_floor_us", "layer_ratio", p.decode, p.decode_floor);
  m.decode.title = "decode: µs per layer vs the layer's floor (bytes / HBM, FLOPs / FP8 peak)";
  std::set<double> contexts;
  for (const Tier& t : tiers)
    for (const json& r : rows(*t.j, "decode")) contexts.insert(num(r, "context").value_or(0));
  if (contexts.size() == 1) m.decode.title += ", context " + grouped(*contexts.begin());
  m.decode.axis = "µs per layer";
  m.decode.empty = "no decode rows in this run";
  m.head = decode_bars(tiers, "embed_head_us", "head_floor_us", "head_ratio", p.head, p.head_floor);
  m.head.title = "embedding + head per step vs the head's floor";
  m.head.axis = "µs per step";
  m.head.empty = rows(first, "decode").empty() ? "no decode rows in this run" : "the bench reports no head time";
  m.prefill = prefill_rows(tiers, fp8);
  m.prefill.title = "prefill: fraction of the FP8 peak" + (fp8 > 0 ? " (" + grouped(fp8) + " TFLOP/s)" : "");
  m.prefill.axis = "of the FP8 peak";
  m.prefill.empty = "no prefill rows in this run";
  m.footer = footer_of(bench, tiers);
  return m;
}

#if DSV4_HAVE_CAIRO

// ---- Drawing.

constexpr PlotRgb kInk{34, 34, 34}, kMuted{96, 96, 96}, kGrid{228, 228, 228}, kWhite{255, 255, 255};
constexpr int kWidth = 1280;

struct Rect {
  double x, y, w, h;
};
enum class Align { Left, Center, Right };

class Canvas {
 public:
  Canvas(int w, int h)
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h), cairo_surface_destroy),
        cr_(cairo_create(surface_.get()), cairo_destroy) {
    fill(0, 0, w, h, kWhite);
  }

  void colour(PlotRgb c) { cairo_set_source_rgb(cr_.get(), c.r / 255.0, c.g / 255.0, c.b / 255.0); }

  // Whole pixels, so that a bar is exactly its colour.
  void fill(double x, double y, double w, double h, PlotRgb c) {
    colour(c);
    cairo_rectangle(cr_.get(), std::round(x), std::round(y), std::round(w), std::round(h));
    cairo_fill(cr_.get());
  }

  void hline(double x0, double x1, double y, PlotRgb c) {
    colour(c);
    cairo_set_line_width(cr_.get(), 1);
    cairo_move_to(cr_.get(), std::round(x0), std::round(y) + 0.5);
    cairo_line_to(cr_.get(), std::round(x1), std::round(y) + 0.5);
    cairo_stroke(cr_.get());
  }

  double width(const std::string& s, double size, bool bold) {
    font(size, bold);
    cairo_text_extents_t e;
    cairo_text_extents(cr_.get(), s.c_str(), &e);
    return e.x_advance;
  }

  // y: the baseline.
  void text(double x, double y, const std::string& s, double size, Align a = Align::Left, bool bold = false,
            PlotRgb c = kInk) {
    const double w = width(s, size, bold);
    colour(c);
    cairo_move_to(cr_.get(), a == Align::Left ? x : a == Align::Center ? x - w / 2 : x - w, y);
    cairo_show_text(cr_.get(), s.c_str());
  }

  void vertical_text(double x, double y, const std::string& s, double size) {  // centred on (x, y), upwards
    const double w = width(s, size, false);
    cairo_save(cr_.get());
    cairo_translate(cr_.get(), x, y);
    cairo_rotate(cr_.get(), -M_PI / 2);
    colour(kMuted);
    cairo_move_to(cr_.get(), -w / 2, 0);
    cairo_show_text(cr_.get(), s.c_str());
    cairo_restore(cr_.get());
  }

  void write_png(const std::string& path) {
    cairo_surface_flush(surface_.get());
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail(path, ": cannot write the plot (", std::strerror(errno), ")");
    const cairo_status_t st = cairo_surface_write_to_png_stream(
        surface_.get(),
        [](void* file, const unsigned char* data, unsigned int n) {
          return std::fwrite(data, 1, n, static_cast<std::FILE*>(file)) == n ? CAIRO_STATUS_SUCCESS
                                                                             : CAIRO_STATUS_WRITE_ERROR;
        },
        f);
    const bool closed = std::fclose(f) == 0;
    if (st != CAIRO_STATUS_SUCCESS || !closed) {
      std::remove(path.c_str());
      fail(path, ": cannot write the plot (", st != CAIRO_STATUS_SUCCESS ? cairo_status_to_string(st) : "close failed",
           ")");
    }
  }

 private:
  void font(double size, bool bold) {
    cairo_select_font_face(cr_.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_.get(), size);
  }

  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface_;
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr_;
};

double nice_step(double x) {  // 1, 2, 2.5 or 5 times a power of ten, >= x
  const double p = std::pow(10, std::floor(std::log10(x))), m = x / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
}

// The legend of `names` right-aligned at (right, y); `draw` false: only its width.
double legend(Canvas& cv, double right, double y, const std::vector<std::pair<std::string, PlotRgb>>& names,
              bool draw = true) {
  double x = right;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    x -= cv.width(it->first, 12, false);
    if (draw) cv.text(x, y, it->first, 12, Align::Left, false, kMuted);
    x -= 18;
    if (draw) cv.fill(x, y - 10, 12, 12, it->second);
    x -= 16;
  }
  return right - x;
}

void draw_bars(Canvas& cv, Rect r, const BarChart& c) {
  cv.text(r.x, r.y + 16, c.title, 15, Align::Left, true);
  std::vector<std::pair<std::string, PlotRgb>> names;
  for (const BarSeries& s : c.series) names.push_back({s.name, s.colour});
  // The legend beside the title, or on a line of its own below it when they would overlap.
  const bool below = cv.width(c.title, 15, true) + legend(cv, 0, 0, names, false) > r.w;
  legend(cv, r.x + r.w, r.y + (below ? 38 : 16), names);
  const double top = below ? 58 : 44;
  const double px = r.x + 76, py = r.y + top, pw = r.w - 84, ph = r.h - top - 30, base = std::round(py + ph);
  if (c.series.empty() || c.groups.empty()) {
    cv.text(px + pw / 2, py + ph / 2, c.empty, 14, Align::Center, false, kMuted);
    return;
  }
  double vmax = 0;
  for (const BarSeries& s : c.series)
    for (const Bar& b : s.bars) vmax = std::max(vmax, b.value.value_or(0));
  if (vmax <= 0) vmax = 1;
  const double want = vmax * ph / (ph - 34);  // room for two lines of labels over the tallest bar
  const double step = nice_step(want / 5), ymax = std::ceil(want / step) * step;
  for (double t = 0; t <= ymax * (1 + 1e-9); t += step) {
    const double y = base - std::round(t / ymax * ph);
    if (t > 0) cv.hline(px, px + pw, y, kGrid);
    cv.text(px - 8, y + 4, step < 1 ? fixed(t, 1) : grouped(t), 11, Align::Right, false, kMuted);
  }
  cv.vertical_text(r.x + 12, py + ph / 2, c.axis, 12);
  const double G = double(c.groups.size()), S = double(c.series.size()), gw = pw / G, gap = 4;
  const double bw = std::floor(std::min(96.0, (gw * 0.86 - (S - 1) * gap) / S));
  const double ratio_size = bw < 44 ? 11 : 12;  // "1.24x" fits a narrow bar
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double x0 = std::round(px + g * gw + (gw - (S * bw + (S - 1) * gap)) / 2);
    for (size_t i = 0; i < c.series.size(); ++i) {
      const Bar& b = c.series[i].bars[g];
      if (!b.value) continue;
      const double x = x0 + double(i) * (bw + gap), h = std::round(std::max(0.0, *b.value) / ymax * ph);
      cv.fill(x, base - h, bw, h, c.series[i].colour);
      cv.text(x + bw / 2, base - h - 5, fmt_us(*b.value), 11, Align::Center, false, kMuted);
      if (b.ratio) cv.text(x + bw / 2, base - h - 19, fmt_ratio(*b.ratio), ratio_size, Align::Center, true);
    }
    cv.text(px + (double(g) + 0.5) * gw, base + 20, c.groups[g], 12, Align::Center);
  }
  cv.hline(px, px + pw, base, kMuted);
}

void draw_peak(Canvas& cv, Rect r, const PeakChart& c) {
  cv.text(r.x, r.y + 16, c.title, 15, Align::Left, true);
  const double lx = r.x + 118, note_w = 236, tw = std::round(r.w - 118 - note_w - 12), py = r.y + 44;
  const double avail = r.h - 44 - 34;
  if (c.rows.empty()) {
    cv.text(r.x + r.w / 2, py + avail / 2, c.empty, 14, Align::Center, false, kMuted);
    return;
  }
  const double rh = std::floor(std::min(40.0, avail / double(c.rows.size()))), th = rh - 10;
  const double bottom = py + rh * double(c.rows.size());
  for (int q = 0; q <= 4; ++q) {
    const double x = std::round(lx + tw * q / 4.0);
    cv.fill(x, py - 4, 1, bottom - py, kGrid);
    cv.text(x, bottom + 12, grouped(25.0 * q) + "%", 11, Align::Center, false, kMuted);
  }
  cv.text(lx + tw / 2, bottom + 28, c.axis, 12, Align::Center, false, kMuted);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const PeakRow& row = c.rows[i];
    const double y = std::round(py + rh * double(i));
    cv.fill(lx, y, tw, th, kBenchPlotPalette.peak);
    cv.fill(lx, y, std::round(std::clamp(row.fraction, 0.0, 1.0) * tw), th, row.colour);
    cv.text(lx - 10, y + th / 2 + 4, row.label, 12, Align::Right);
    cv.text(lx + tw + 12, y + th / 2 + 4, row.note, 12, Align::Left, false, kInk);
  }
}

// Frees Cairo's font caches and fontconfig's state once the plot's Cairo objects are gone (also when
// writing failed): they would be reported as leaks by a leak checker (the AddressSanitizer CI stage).
struct FontStateReset {
  FontStateReset() = default;
  FontStateReset(const FontStateReset&) = delete;
  FontStateReset& operator=(const FontStateReset&) = delete;
  ~FontStateReset() {
    cairo_debug_reset_static_data();
    FcFini();
  }
};

void draw(const PlotModel& m, const std::string& path) {
  const int footer_y = 846, height = footer_y + 18 * int(m.footer.size()) + 10;
  Canvas cv(kWidth, height);
  cv.text(24, 34, m.title, 20, Align::Left, true);
  cv.text(24, 58, m.subtitle, 13, Align::Left, false, kMuted);
  draw_bars(cv, {24, 80, kWidth - 48, 420}, m.decode);
  draw_bars(cv, {24, 524, 650, 300}, m.head);
  draw_peak(cv, {706, 524, kWidth - 706 - 24, 300}, m.prefill);
  for (size_t i = 0; i < m.footer.size(); ++i)
    cv.text(24, footer_y + 18 * double(i), m.footer[i], 12, Align::Left, false, kMuted);
  cv.write_png(path);
}

#endif  // DSV4_HAVE_CAIRO

CLI::Validator png_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
#if !DSV4_HAVE_CAIRO
        return "this dsv4 was built without Cairo (libcairo2-dev): it cannot plot";
#endif
        std::string ext = std::filesystem::path(s).extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
        if (ext != ".png" || std::filesystem::path(s).stem().empty())
          return "expected a file name ending in .png, got '" + s + "'";
        return "";
      },
      "FILE.png");
}

CLI::Validator existing_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::error_code ec;
        return std::filesystem::is_regular_file(s, ec) ? "" : "no such file '" + s + "'";
      },
      "FILE.json");
}

}  // namespace

void write_bench_plot(const nlohmann::json& bench, const std::string& path) {
  const PlotModel m = plot_model(bench, path);
#if DSV4_HAVE_CAIRO
  const FontStateReset reset;  // destroyed after draw()'s canvas
  draw(m, path);
#else
  fail(path, ": this dsv4 was built without Cairo (libcairo2-dev): it cannot plot");
#endif
}

nlohmann::json read_bench_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail(path, ": cannot read (", std::strerror(errno), ")");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    fail(path, ": not a JSON file (", e.what(), ")");
  }
  if (!recorded_date(j) && j.is_object()) {
    std::smatch m;
    const std::string name = std::filesystem::path(path).filename().string();
    static const std::regex dated(R"(^(\d{4}-\d{2}-\d{2}).*)");
    j["date"] = std::regex_match(name, m, dated) ? m[1].str() : "date not recorded";
  }
  return j;
}

void add_bench_plot_options(CLI::App& bench, BenchPlotArgs& a) {
  a.run_options.clear();
  for (const CLI::Option* o : bench.get_options())
    if (o != bench.get_help_ptr()) a.run_options.push_back(o);
  CLI::Option* plot = bench.add_option(
      "--plot", a.plot,
      "Also draw the results as a PNG chart to FILE.png: decode per layer and the head vs their floors per "
      "batch, prefill vs the FP8 peak (needs a build with Cairo)");
  plot->check(png_file());
  bench.add_option("--from-json", a.from_json,
                   "Run nothing: re-plot the --json FILE of an earlier run to --plot FILE.png (no GPU needed)")
      ->check(existing_file())
      ->needs(plot);
}

void plot_bench_results(const BenchPlotArgs& a, const nlohmann::json& results) {
  if (a.plot.empty()) return;
  write_bench_plot(results, a.plot);
  std::fprintf(stderr, "bench: plot written to %s\n", a.plot.c_str());
}

bool replot_bench_json(const BenchPlotArgs& a) {
  if (a.from_json.empty()) return false;
  for (const CLI::Option* o : a.run_options)
    if (o->count() > 0) fail("--from-json cannot be used with ", o->get_name(), " (it re-plots a run, it runs nothing)");
  write_bench_plot(read_bench_json(a.from_json), a.plot);
  std::fprintf(stderr, "bench: plot of %s written to %s\n", a.from_json.c_str(), a.plot.c_str());
  return true;
}

}  // namespace dsv4::cli
