#include "obs/report_html.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace loom::obs {
namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An image's SVG, inline (the XML declaration dropped); a note if missing.
std::string inline_image(const std::string& alt, const std::string& file, const std::string& dir) {
  std::string svg_name = file;
  if (svg_name.size() > 4 && svg_name.compare(svg_name.size() - 4, 4, ".png") == 0)
    svg_name.replace(svg_name.size() - 4, 4, ".svg");
  if (svg_name.find('/') != std::string::npos) return "<em>(" + escaped(file) + ": not a chart of this report)</em>";
  std::string svg = read_file(dir + "/" + svg_name);
  const size_t start = svg.find("<svg");
  if (start == std::string::npos) return "<em>(" + escaped(svg_name) + " is missing)</em>";
  return "<figure>" + svg.substr(start) + "<figcaption>" + escaped(alt) + "</figcaption></figure>";
}

// **bold**, `code` and images inside one line of text.
std::string inline_markup(const std::string& line, const std::string& dir) {
  std::string out;
  bool bold = false, code = false;
  for (size_t i = 0; i < line.size(); i++) {
    if (!code && line.compare(i, 2, "![") == 0) {
      const size_t close = line.find("](", i), end = close == std::string::npos ? close : line.find(')', close);
      if (end != std::string::npos) {
        out += inline_image(line.substr(i + 2, close - i - 2), line.substr(close + 2, end - close - 2), dir);
        i = end;
        continue;
      }
    }
    if (line[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && line.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      i++;
    } else {
      out += escaped(std::string(1, line[i]));
    }
  }
  if (code) out += "</code>";
  if (bold) out += "</strong>";
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < row.size(); i++) {  // after the leading '|'
    if (row[i] == '|') out.push_back(cell), cell.clear();
    else cell += row[i];
  }
  for (std::string& c : out) {
    while (!c.empty() && c.front() == ' ') c.erase(0, 1);
    while (!c.empty() && c.back() == ' ') c.pop_back();
  }
  return out;
}

}  // namespace

std::string report_html(const std::string& markdown, const std::string& title, const std::string& dir) {
  std::string body;
  std::istringstream in(markdown);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  for (size_t i = 0; i < lines.size(); i++) {
    const std::string& l = lines[i];
    if (l.empty()) continue;
    if (l.rfind("## ", 0) == 0) {
      body += "<h2>" + inline_markup(l.substr(3), dir) + "</h2>\n";
    } else if (l.rfind("# ", 0) == 0) {
      body += "<h1>" + inline_markup(l.substr(2), dir) + "</h1>\n";
    } else if (l.rfind("> ", 0) == 0) {
      body += "<blockquote>" + inline_markup(l.substr(2), dir) + "</blockquote>\n";
    } else if (l.rfind("- ", 0) == 0) {
      body += "<ul>\n";
      for (; i < lines.size() && lines[i].rfind("- ", 0) == 0; i++)
        body += "<li>" + inline_markup(lines[i].substr(2), dir) + "</li>\n";
      i--;
      body += "</ul>\n";
    } else if (l[0] == '|') {
      body += "<table>\n";
      bool header = true;
      for (; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; i++) {
        if (lines[i].rfind("|---", 0) == 0) continue;
        body += "<tr>";
        for (const std::string& c : cells(lines[i]))
          body += (header ? "<th>" : "<td>") + inline_markup(c, dir) + (header ? "</th>" : "</td>");
        body += "</tr>\n";
        header = false;
      }
      i--;
      body += "</table>\n";
    } else {
      body += "<p>" + inline_markup(l, dir) + "</p>\n";
    }
  }
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escaped(title) +
         "</title>\n<style>\n"
         "body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }\n"
         "table { border-collapse: collapse; margin: 0.5em 0; } th, td { border: 1px solid #ccc; padding: 0.2em "
         "0.6em; text-align: left; }\n"
         "blockquote { color: #555; border-left: 3px solid #ccc; margin: 0.5em 0; padding-left: 0.8em; }\n"
         "figure { margin: 1em 0; } svg { max-width: 100%; height: auto; } code { background: #f3f3f3; }\n"
         "</style>\n</head>\n<body>\n" +
         body + "</body>\n</html>\n";
}

}  // namespace loom::obs
