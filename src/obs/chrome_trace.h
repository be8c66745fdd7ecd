// One Chrome trace JSON file for the whole job (Perfetto and
// chrome://tracing open it): pid = world rank, named "rank N (dp d, tp t,
// pp p)"; tid = track (compute, async comm); spans as matched "B"/"E"
// pairs, properly nested per track; instants as "i". Times in microseconds
// since the common origin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "obs/trace_span.h"

namespace loom {
class Communicator;
}

namespace loom::obs {

class TraceRecorder;

std::string chrome_trace_json(const std::vector<RankTrace>& ranks);

// Every rank's TraceRecorder::serialize() bytes, merged into `path` (atomically).
void merge_chrome_trace(const std::vector<std::vector<uint8_t>>& per_rank, const std::string& path);

// Collective over `world` (every rank calls it): gathers each rank's spans to
// every rank and rank 0 writes `path` and returns them (for analyze_trace);
// other ranks get an empty vector. Bytes travel as fp32 words (an all_gather
// only copies them), padded to the longest rank's.
std::vector<RankTrace> gather_chrome_trace(Communicator& world, const TraceRecorder& recorder, const std::string& path);

// Reads a trace this code wrote (also accepts "X" complete events). Spans
// left open by a cut-off file are closed at the last timestamp seen and
// noted in `notes`. Throws UserError naming the file if it is not JSON.
std::vector<RankTrace> read_chrome_trace(const std::string& path, std::vector<std::string>* notes);

}  // namespace loom::obs
