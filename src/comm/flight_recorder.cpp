#include "comm/flight_recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <chrono>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"

namespace loom {

namespace {

constexpr uint64_t kMagic = 0x32544847494c46ull;  // "FLIGHT2"
constexpr int kMaxGroups = 12, kMaxPeers = 64, kText = 56;

double wall_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void copy_text(char* dst, const char* src) {
  std::strncpy(dst, src ? src : "", kText - 1);
  dst[kText - 1] = '\0';
}

}  // namespace

// The mapped record: plain stores by its owner, read (possibly torn: it is a
// diagnosis, not a protocol) by the others.
struct FlightGroup {
  char name[16];
  uint64_t entered, completed;  // collectives: last entered / highest completed sequence number
  double entered_at, completed_at;
  char entered_op[kText];
  uint64_t sent[kMaxPeers], received[kMaxPeers];  // point-to-point, posted per peer (group rank)
  uint64_t sent_done[kMaxPeers], received_done[kMaxPeers];
  double p2p_at;
  char p2p_op[kText];
};

struct FlightRecord {
  uint64_t magic;
  int32_t world_rank, pid, step, n_groups;
  char host[64];
  double started_at, span_at;
  char span[kText];
  FlightGroup groups[kMaxGroups];
  double heartbeat_at;  // stamped by the owner's heartbeat thread
};

std::string FlightRecorder::record_path(const std::string& dir, int world_rank) {
  return strprintf("%s/rank_%05d.flight", dir.c_str(), world_rank);
}

FlightRecorder::FlightRecorder(std::string dir, int world_rank, FlightOptions options)
    : dir_(std::move(dir)), world_rank_(world_rank), options_(options) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string path = record_path(dir_, world_rank);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_USER_CHECK(fd >= 0, "cannot create the flight record '%s': %s", path.c_str(), std::strerror(errno));
  const bool sized = ::ftruncate(fd, sizeof(FlightRecord)) == 0;
  void* p = sized ? ::mmap(nullptr, sizeof(FlightRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  LOOM_USER_CHECK(p != MAP_FAILED, "cannot map the flight record '%s': %s", path.c_str(), std::strerror(err));
  rec_ = static_cast<FlightRecord*>(p);
  std::memset(rec_, 0, sizeof(FlightRecord));
  rec_->world_rank = world_rank;
  rec_->pid = int32_t(::getpid());
  ::gethostname(rec_->host, sizeof rec_->host - 1);
  rec_->started_at = wall_now();
  rec_->heartbeat_at = rec_->started_at;
  rec_->magic = kMagic;
  if (options_.heartbeat_s > 0) heartbeat_ = std::thread([this] { beat(); });
}

FlightRecorder::~FlightRecorder() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
  if (rec_) ::munmap(rec_, sizeof(FlightRecord));
}

// Stamps the record every heartbeat_s; wakes every 50 ms to see a stop.
void FlightRecorder::beat() {
  double next = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const double now = wall_now();
    if (now >= next) rec_->heartbeat_at = now, next = now + options_.heartbeat_s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int FlightRecorder::add_group(const std::string& name, const std::vector<int>& members, int my_group_rank) {
  if (rec_->n_groups >= kMaxGroups) return -1;
  const int slot = rec_->n_groups;
  FlightGroup& g = rec_->groups[slot];
  std::strncpy(g.name, name.c_str(), sizeof g.name - 1);
  groups_.push_back(Group{name, members, my_group_rank});
  rec_->n_groups = slot + 1;
  return slot;
}

uint64_t FlightRecorder::enter(int slot, const char* op) {
  if (slot < 0) return 0;
  FlightGroup& g = rec_->groups[slot];
  copy_text(g.entered_op, op);
  g.entered_at = wall_now();
  return ++g.entered;
}

void FlightRecorder::complete(int slot, uint64_t seq) {
  if (slot < 0) return;
  FlightGroup& g = rec_->groups[slot];
  g.completed = std::max(g.completed, seq);
  g.completed_at = wall_now();
}

uint64_t FlightRecorder::enter_p2p(int slot, bool send, int peer, const char* op) {
  if (slot < 0 || peer < 0 || peer >= kMaxPeers) return 0;
  FlightGroup& g = rec_->groups[slot];
  copy_text(g.p2p_op, op);
  g.p2p_at = wall_now();
  return ++(send ? g.sent : g.received)[peer];
}

void FlightRecorder::complete_p2p(int slot, bool send, int peer) {
  if (slot < 0 || peer < 0 || peer >= kMaxPeers) return;
  FlightGroup& g = rec_->groups[slot];
  ++(send ? g.sent_done : g.received_done)[peer];
}

void FlightRecorder::note_span(const char* name) {
  copy_text(rec_->span, name);
  rec_->span_at = wall_now();
}

void FlightRecorder::note_step(int step) { rec_->step = step; }

namespace {

// Another rank's record, read whole; false if it is missing or not a record.
bool read_record(const std::string& path, FlightRecord& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::pread(fd, &out, sizeof out, 0);
  ::close(fd);
  return n == ssize_t(sizeof out) && out.magic == kMagic;
}

const FlightGroup* find_group(const FlightRecord& r, const std::string& name) {
  for (int i = 0; i < std::min(r.n_groups, kMaxGroups); i++)
    if (name == std::string(r.groups[i].name, strnlen(r.groups[i].name, sizeof r.groups[i].name)))
      return &r.groups[i];
  return nullptr;
}

std::string text_of(const char* field) { return std::string(field, strnlen(field, kText)); }

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); i++) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// "its last on dp: #56 all_reduce(sum) of 1024 fp32, entered 31.2 s ago and completed; last span 'forward' at
// step 12, 30.9 s ago (pid 123 on vm)"
std::string what_member_did(const FlightRecord& r, const FlightGroup* g, const std::string& group, double now) {
  std::string s;
  if (g && g->entered > 0)
    s = strprintf("its last on %s: #%llu %s, entered %.1f s ago%s", group.c_str(), (unsigned long long)g->entered,
                  text_of(g->entered_op).c_str(), now - g->entered_at,
                  g->completed >= g->entered ? " and completed" : ", not completed");
  else
    s = strprintf("it entered nothing on %s", group.c_str());
  if (r.span_at > 0)
    s += strprintf("; last span '%s' at step %d, %.1f s ago", text_of(r.span).c_str(), r.step, now - r.span_at);
  s += strprintf(" (pid %d on %s)", r.pid, std::string(r.host, strnlen(r.host, sizeof r.host)).c_str());
  return s;
}

}  // namespace

namespace {

// "rank 3's heartbeat stopped 6.2 s ago: the process is frozen (stopped, not
// dead); <what it did>"
std::string frozen_text(int rank, const FlightRecord& r, const FlightGroup* g, const std::string& group, double now) {
  return strprintf("\n  rank %d: its heartbeat stopped %.1f s ago: the process is frozen (stopped, not dead); %s", rank,
                   now - r.heartbeat_at, what_member_did(r, g, group, now).c_str());
}

}  // namespace

std::vector<int> FlightRecorder::judged_ranks(const std::vector<int>& group) const {
  std::vector<int> ranks;
  if (options_.world_size <= 0) ranks = group;
  for (int r = 0; r < options_.world_size; r++) ranks.push_back(r);
  ranks.erase(std::remove(ranks.begin(), ranks.end(), world_rank_), ranks.end());
  return ranks;
}

// A deadline counts from this rank's entry, not from the stop: under load a
// peer may enter late and freeze a moment before the deadline, its stamp
// still fresh. So a fresh stamp proves nothing yet: wait until each such rank
// stamps again (alive) or its stamp goes stale (frozen), at most stale_s plus
// two periods; a live rank answers within one period.
void FlightRecorder::settle_heartbeats(const std::vector<int>& ranks) const {
  std::vector<std::pair<int, double>> open;  // rank, the stamp first read
  for (int m : ranks) {
    FlightRecord r;
    if (read_record(record_path(dir_, m), r) && wall_now() - r.heartbeat_at <= options_.stale_s)
      open.push_back({m, r.heartbeat_at});
  }
  const double give_up = wall_now() + options_.stale_s + 2 * std::max(options_.heartbeat_s, 0.05);
  while (!open.empty() && wall_now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::erase_if(open, [&](const std::pair<int, double>& o) {
      FlightRecord r;
      return !read_record(record_path(dir_, o.first), r) || r.heartbeat_at != o.second ||
             wall_now() - r.heartbeat_at > options_.stale_s;
    });
  }
}

void FlightRecorder::find_frozen(const std::vector<int>& group, double now, HangReport& out,
                                 std::string& lines) const {
  const std::vector<int> ranks = judged_ranks(group);
  for (int m : ranks) {
    FlightRecord r;
    if (!read_record(record_path(dir_, m), r) || now - r.heartbeat_at <= options_.stale_s) continue;
    out.culprits.push_back(m);
    out.frozen.push_back({m, r.pid, std::string(r.host, strnlen(r.host, sizeof r.host))});
    const FlightGroup* last = nullptr;  // the group it last entered an operation on
    for (int i = 0; i < std::min(r.n_groups, kMaxGroups); i++)
      if (!last || r.groups[i].entered_at > last->entered_at) last = &r.groups[i];
    lines += frozen_text(m, r, last, last ? std::string(last->name, strnlen(last->name, sizeof last->name)) : "", now);
  }
  if (!out.culprits.empty()) out.evidence = "heartbeat";
}

HangReport FlightRecorder::explain_collective(int slot, uint64_t seq) const {
  HangReport out;
  if (slot < 0) return out;
  const Group& grp = groups_[size_t(slot)];
  settle_heartbeats(judged_ranks(grp.members));
  const double now = wall_now();
  out.text = strprintf("flight recorder: %s #%llu on group %s (ranks %s):", text_of(rec_->groups[slot].entered_op).c_str(),
                       (unsigned long long)seq, grp.name.c_str(), ranks_text(grp.members).c_str());
  std::vector<int> entered, absent;
  std::string absent_text, frozen_lines;
  HangReport frozen_report;
  find_frozen(grp.members, now, frozen_report, frozen_lines);
  const std::vector<int>& frozen = frozen_report.culprits;
  for (int m : grp.members) {
    if (m == world_rank_) continue;
    FlightRecord r;
    if (!read_record(record_path(dir_, m), r)) {
      out.text += strprintf("\n  rank %d: no readable record at %s", m, record_path(dir_, m).c_str());
      continue;
    }
    const FlightGroup* g = find_group(r, grp.name);
    const uint64_t got = g ? g->entered : 0;
    if (got >= seq) {
      entered.push_back(m);
      continue;
    }
    absent.push_back(m);
    absent_text += strprintf("\n  rank %d never entered #%llu; %s", m, (unsigned long long)seq,
                             what_member_did(r, g, grp.name, now).c_str());
  }
  // A frozen member explains everything after it: the members that never
  // entered may wait on it elsewhere (healthy: their heartbeats go on).
  if (!frozen.empty()) {
    out.culprits = frozen, out.evidence = "heartbeat", out.frozen = frozen_report.frozen;
    out.text += frozen_lines;
    std::vector<int> waiting;  // never entered, heartbeat alive
    for (int m : absent)
      if (std::count(frozen.begin(), frozen.end(), m) == 0) waiting.push_back(m);
    if (!waiting.empty())
      out.text += strprintf("\n  %s %s never entered #%llu but %s on: alive (busy, or waiting on the frozen rank "
                            "elsewhere), not judged", waiting.size() == 1 ? "rank" : "ranks",
                            ranks_text(waiting).c_str(), (unsigned long long)seq,
                            waiting.size() == 1 ? "its heartbeat goes" : "their heartbeats go");
    return out;
  }
  out.culprits = absent;
  out.text += absent_text;
  if (!absent.empty()) out.evidence = "never entered";
  if (out.culprits.empty())
    out.text += strprintf("\n  every member entered #%llu and every heartbeat goes on: it is stuck inside the "
                          "operation (the transport or the link)", (unsigned long long)seq);
  else if (!entered.empty())
    out.text += strprintf("\n  ranks %s entered it", ranks_text(entered).c_str());
  return out;
}

HangReport FlightRecorder::explain_p2p(int slot, bool send, int peer, uint64_t count) const {
  HangReport out;
  if (slot < 0 || peer < 0 || size_t(peer) >= groups_[size_t(slot)].members.size()) return out;
  const Group& grp = groups_[size_t(slot)];
  const int peer_world = grp.members[size_t(peer)];
  settle_heartbeats(judged_ranks({peer_world}));
  const double now = wall_now();
  out.text = strprintf("flight recorder: %s #%llu %s rank %d on group %s:", send ? "send" : "receive",
                       (unsigned long long)count, send ? "to" : "from", peer_world, grp.name.c_str());
  FlightRecord r;
  if (!read_record(record_path(dir_, peer_world), r)) {
    out.text += strprintf("\n  rank %d: no readable record at %s", peer_world, record_path(dir_, peer_world).c_str());
    return out;
  }
  const FlightGroup* g = find_group(r, grp.name);
  std::string frozen_lines;
  find_frozen({peer_world}, now, out, frozen_lines);
  if (!out.culprits.empty()) {  // the peer, or a rank it waits on (its heartbeat goes on)
    out.text += frozen_lines;
    return out;
  }
  const uint64_t posted = g && grp.me < kMaxPeers ? (send ? g->received : g->sent)[grp.me] : 0;
  if (posted >= count) {
    out.text += strprintf("\n  rank %d posted the matching %s and its heartbeat goes on: the transfer is stuck in the "
                          "transport", peer_world, send ? "receive" : "send");
    return out;
  }
  out.culprits.push_back(peer_world), out.evidence = "never entered";
  out.text += strprintf("\n  rank %d never posted the matching %s #%llu (it posted %llu); %s", peer_world,
                        send ? "receive" : "send", (unsigned long long)count, (unsigned long long)posted,
                        what_member_did(r, g, grp.name, now).c_str());
  return out;
}

void FlightRecorder::write_hang(const HangReport& report, const std::string& what) const {
  nlohmann::json j = {{"waiting_rank", world_rank_}, {"waiting_for", what}, {"culprits", report.culprits},
                      {"evidence", report.evidence}, {"explanation", report.text}, {"time", wall_now()}};
  j["frozen"] = nlohmann::json::array();
  for (const HangReport::Process& p : report.frozen)
    j["frozen"].push_back({{"rank", p.rank}, {"pid", p.pid}, {"host", p.host}});
  // The first rank whose deadline expires writes the verdict: it waited
  // longest, nearest the cause; a rank timing out later may be waiting on
  // that first one (which is healthy) and would name it.
  const int claim = ::open((dir_ + "/hang.claim").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (claim < 0) return;
  ::close(claim);
  try {
    AtomicFile f(dir_ + "/hang.json");
    const std::string text = j.dump(2) + "\n";
    f.write(text.data(), text.size());
    f.commit();
  } catch (const std::exception&) {
    // A diagnosis that cannot be written must not hide the hang itself.
  }
}

}  // namespace loom
