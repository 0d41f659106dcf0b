#include "qualify/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace fp4moe {
namespace {

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }
std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::set<int64_t> timed_tokens(const Verdict& v) {
  std::set<int64_t> tokens;
  for (const BackendVerdict& b : v.backends)
    for (const TimingPoint& t : b.timings) tokens.insert(t.tokens);
  return tokens;
}

const TimingPoint* timing_at(const BackendVerdict& b, int64_t tokens) {
  for (const TimingPoint& t : b.timings)
    if (t.tokens == tokens) return &t;
  return nullptr;
}

}  // namespace

std::string verdict_table(const Verdict& v) {
  std::ostringstream out;
  // CUDA encodes versions as 1000 * major + 10 * minor.
  out << "qualification: " << v.key.device_name << " (SM " << v.key.sm / 10 << "." << v.key.sm % 10
      << ", driver " << v.key.kernel_driver << ", CUDA driver API " << v.key.driver_version / 1000 << "."
      << v.key.driver_version % 1000 / 10 << ", runtime "
      << v.key.runtime_version / 1000 << "." << v.key.runtime_version % 1000 / 10 << ")\n";
  out << "problem:       " << v.key.problem << ", up to " << v.key.max_tokens << " tokens\n";
  out << "build:         " << v.key.build_id << "\n";
  if (v.copy_bandwidth_gbps > 0) out << "copy bandwidth measured: " << format("%.0f", v.copy_bandwidth_gbps) << " GB/s\n";
  out << "\n";
  std::vector<const BackendVerdict*> timed;
  for (const BackendVerdict& b : v.backends)
    if (b.qualified && !b.timings.empty()) timed.push_back(&b);
  const size_t col = 24;
  if (!timed.empty()) {
    out << pad("tokens", 8) << pad_left("floor us", 10);
    for (const BackendVerdict* b : timed) out << pad_left(b->id, col + 2);
    out << "  chosen\n";
    for (int64_t tokens : timed_tokens(v)) {
      double floor_us = 0;
      for (const BackendVerdict* b : timed)
        if (const TimingPoint* t = timing_at(*b, tokens); t && t->floor_microseconds > 0) floor_us = t->floor_microseconds;
      out << pad(std::to_string(tokens), 8) << pad_left(floor_us > 0 ? format("%.1f", floor_us) : "-", 10);
      for (const BackendVerdict* b : timed) {
        const TimingPoint* t = timing_at(*b, tokens);
        std::string cell = "-";
        if (t) {
          cell = format("%.1f us", t->microseconds);
          if (t->floor_microseconds > 0) cell += " (" + format("%.0f", 100.0 * t->floor_microseconds / t->microseconds) + "% bw)";
        }
        out << pad_left(cell, col + 2);
      }
      out << "  " << v.backend_for(tokens) << "\n";
    }
    out << "\n";
  }
  for (const BackendVerdict& b : v.backends) {
    std::string status;
    if (!b.supported) status = "unsupported: " + b.support_reason;
    else if (!b.qualified) status = "REJECTED: " + b.failure;
    else status = "qualified (" + std::to_string(b.probes.size()) + " probes passed)";
    out << "  " << pad(b.id, 34) << status << "\n";
  }
  if (v.chosen.empty()) out << "\nno backend qualified: the runtime will refuse to guess (see the reasons above)\n";
  return out.str();
}

std::string verdict_svg(const Verdict& v) {
  const double width = 900, height = 560, left = 80, right = 260, top = 50, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  double min_tokens = 1e300, max_tokens = 0, min_us = 1e300, max_us = 0;
  std::map<int64_t, double> floor_points;
  for (const BackendVerdict& b : v.backends) {
    if (!b.qualified) continue;
    for (const TimingPoint& t : b.timings) {
      if (t.microseconds <= 0) continue;
      min_tokens = std::min(min_tokens, double(t.tokens));
      max_tokens = std::max(max_tokens, double(t.tokens));
      min_us = std::min(min_us, t.microseconds);
      max_us = std::max(max_us, t.microseconds);
      if (t.floor_microseconds > 0) {
        floor_points[t.tokens] = t.floor_microseconds;
        min_us = std::min(min_us, t.floor_microseconds);
      }
    }
  }
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">fp4moe qualify: " << escape_xml(v.key.problem) << " on "
      << escape_xml(v.key.device_name) << "</text>\n";
  if (max_tokens <= 0) {
    svg << "<text x=\"" << left << "\" y=\"" << top + 40 << "\">no qualified backend has timings</text>\n</svg>\n";
    return svg.str();
  }
  if (max_tokens <= min_tokens) max_tokens = min_tokens * 2;
  const double lx0 = std::log10(min_tokens), lx1 = std::log10(max_tokens);
  const double ly0 = std::floor(std::log10(min_us)), ly1 = std::ceil(std::log10(max_us * 1.01));
  auto px = [&](double tokens) { return left + (std::log10(tokens) - lx0) / (lx1 - lx0) * plot_w; };
  auto py = [&](double us) { return top + plot_h - (std::log10(us) - ly0) / std::max(ly1 - ly0, 1e-9) * plot_h; };
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double e = ly0; e <= ly1 + 1e-9; e += 1) {
    const double y = py(std::pow(10, e));
    svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y << "\" y2=\"" << y
        << "\" stroke=\"#ddd\"/><text x=\"" << left - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << format("%g", std::pow(10, e)) << "</text>\n";
  }
  for (int64_t tokens : timed_tokens(v)) {
    const double x = px(double(tokens));
    svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << top << "\" y2=\"" << top + plot_h
        << "\" stroke=\"#eee\"/><text x=\"" << x << "\" y=\"" << top + plot_h + 16 << "\" text-anchor=\"middle\">"
        << tokens << "</text>\n";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 18 << "\" text-anchor=\"middle\">tokens</text>\n";
  svg << "<text transform=\"translate(20," << top + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << "microseconds per MoE layer</text>\n";
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
  int series = 0;
  double legend_y = top + 10;
  auto legend = [&](const std::string& label, const std::string& color, bool dashed) {
    svg << "<line x1=\"" << left + plot_w + 16 << "\" x2=\"" << left + plot_w + 40 << "\" y1=\"" << legend_y << "\" y2=\""
        << legend_y << "\" stroke=\"" << color << "\" stroke-width=\"2\"" << (dashed ? " stroke-dasharray=\"5,4\"" : "")
        << "/><text x=\"" << left + plot_w + 46 << "\" y=\"" << legend_y + 4 << "\">" << escape_xml(label) << "</text>\n";
    legend_y += 20;
  };
  for (const BackendVerdict& b : v.backends) {
    if (!b.qualified || b.timings.empty()) continue;
    const std::string color = kColors[series++ % 7];
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const TimingPoint& t : b.timings)
      if (t.microseconds > 0) svg << px(double(t.tokens)) << "," << py(t.microseconds) << " ";
    svg << "\"/>\n";
    for (const TimingPoint& t : b.timings)
      if (t.microseconds > 0)
        svg << "<circle cx=\"" << px(double(t.tokens)) << "\" cy=\"" << py(t.microseconds) << "\" r=\"3\" fill=\""
            << color << "\"><title>" << escape_xml(b.id) << ": " << t.tokens << " tokens, "
            << format("%.1f", t.microseconds) << " us</title></circle>\n";
    legend(b.id, color, false);
  }
  if (!floor_points.empty()) {
    svg << "<polyline fill=\"none\" stroke=\"#000\" stroke-dasharray=\"5,4\" points=\"";
    for (const auto& [tokens, us] : floor_points) svg << px(double(tokens)) << "," << py(us) << " ";
    svg << "\"/>\n";
    legend("bandwidth floor", "#000", true);
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace fp4moe
