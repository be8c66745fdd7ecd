// report.html: the report as one self-contained page a browser opens, with
// every chart's SVG inline (no other file needed, nothing fetched).
//
// It is made from report.md by a converter for exactly the Markdown that
// report.cpp writes: "#"/"##" headings, paragraphs, "> " notes, "- "
// lists, pipe tables, **bold**, `code` and ![alt](chart.svg|png) images.
#pragma once

#include <string>

namespace loom::obs {

// `markdown` as an HTML document titled `title`; an image's SVG is read from
// `dir` (a PNG reference uses the SVG of the same name) and put inline.
std::string report_html(const std::string& markdown, const std::string& title, const std::string& dir);

}  // namespace loom::obs
