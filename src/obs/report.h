// `loom report`: a run directory -> RUN_DIR/report/ with charts (SVG, and
// PNG when rsvg-convert is on PATH) and report.md, a Markdown summary of
// throughput, MFU, time split, pipeline bubble per stage, exposed
// communication per group, overlap, and predicted against measured memory
// and step time. Works on partial runs, saying what is missing.
#pragma once

#include <string>
#include <vector>

#include "obs/run_reader.h"

namespace loom::obs {

struct ReportOutput {
  std::string dir;                 // RUN_DIR/report
  std::vector<std::string> files;  // written, relative to dir
  std::string png_note;            // why there are no PNGs, when there are none
};

// Throws UserError if the report folder cannot be written.
ReportOutput write_report(const RunData& run);

// rsvg-convert's full path, or "" when it is not on PATH.
std::string find_svg_converter();

}  // namespace loom::obs
