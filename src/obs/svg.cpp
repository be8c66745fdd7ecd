#include "obs/svg.h"

#include "core/check.h"

namespace loom::obs {

Svg::Svg(double width, double height) : width_(width), height_(height) {}

std::string Svg::escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

void Svg::rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip,
               const std::string& stroke) {
  body_ += strprintf(R"(<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s" stroke="%s")", x, y, w, h,
                     escape(fill).c_str(), escape(stroke).c_str());
  body_ += tooltip.empty() ? "/>\n" : ("><title>" + escape(tooltip) + "</title></rect>\n");
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const std::string& dash) {
  body_ += strprintf(R"(<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="%s" stroke-width="%.2f")", x1, y1, x2,
                     y2, escape(stroke).c_str(), width);
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + escape(dash) + "\"";
  body_ += "/>\n";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke, double width,
                   const std::string& series_id) {
  std::string pts;
  for (const auto& [x, y] : points) pts += strprintf("%.2f,%.2f ", x, y);
  body_ += strprintf(R"(<polyline data-series="%s" fill="none" stroke="%s" stroke-width="%.2f" points="%s"/>)",
                     escape(series_id).c_str(), escape(stroke).c_str(), width, pts.c_str());
  body_ += "\n";
}

void Svg::text(double x, double y, const std::string& s, Anchor anchor, double size, double rotate_deg,
               const std::string& fill) {
  const char* a = anchor == Anchor::start ? "start" : anchor == Anchor::middle ? "middle" : "end";
  body_ += strprintf(R"(<text x="%.2f" y="%.2f" font-size="%.1f" text-anchor="%s" fill="%s")", x, y, size, a,
                     escape(fill).c_str());
  if (rotate_deg != 0) body_ += strprintf(" transform=\"rotate(%.1f %.2f %.2f)\"", rotate_deg, x, y);
  body_ += ">" + escape(s) + "</text>\n";
}

void Svg::begin_group(const std::string& attributes) { body_ += "<g " + attributes + ">\n"; }
void Svg::end_group() { body_ += "</g>\n"; }

std::string Svg::str() const {
  return strprintf(R"(<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif">
<rect x="0" y="0" width="%.0f" height="%.0f" fill="white"/>
)",
                   width_, height_, width_, height_, width_, height_) +
         body_ + "</svg>\n";
}

}  // namespace loom::obs
