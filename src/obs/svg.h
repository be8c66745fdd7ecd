// A small SVG document builder: just the shapes the charts need, with text
// escaped so any label yields well-formed XML.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::obs {

class Svg {
 public:
  Svg(double width, double height);

  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip = "",
            const std::string& stroke = "none");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = "");
  // One connected line; `id` becomes data-series, so readers can find a series.
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke, double width,
                const std::string& series_id);
  enum class Anchor { start, middle, end };
  void text(double x, double y, const std::string& s, Anchor anchor = Anchor::start, double size = 12,
            double rotate_deg = 0, const std::string& fill = "#222");
  void begin_group(const std::string& attributes);  // e.g. class="series"
  void end_group();

  std::string str() const;  // the whole document
  static std::string escape(const std::string& s);

 private:
  double width_, height_;
  std::string body_;
};

}  // namespace loom::obs
