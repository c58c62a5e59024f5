// SPDX-License-Identifier: Apache-2.0
// What the last operation did, as the C API reports it: sparrowCommGetStats, the per-peer stats,
// progress (from any thread) and the stats JSON.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "api/handle.h"
#include "collectives/bcast.h"
#include "format/index_codec.h"
#include "format/value_codec.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

using namespace sparrow::api;

extern "C" {

SPARROW_EXPORT sparrowResult_t sparrowCommGetStats(sparrowComm_t comm, sparrowStats* out) {
  if (!comm || !out) return invalid("sparrowCommGetStats: NULL argument");
  if (out->size < sizeof(sparrowStats) || out->version < 1)
    return fail(sparrow::InvalidArgument("sparrowCommGetStats: stats was not initialised with SPARROW_STATS_INITIALIZER "
                                         "(size " + std::to_string(out->size) + ", version " +
                                         std::to_string(out->version) + ")"));
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetStats", comm));
  const auto& st = comm->coll->stats;
  out->ops = st.ops;
  out->denseBytes = st.dense_bytes;
  out->wireBytes = st.wire_bytes;
  out->changedElements = st.changed;
  out->density = st.density;
  out->encodeSeconds = st.encode_s;
  out->applySeconds = st.apply_s;
  out->totalSeconds = st.total_s;
  out->resyncs = st.resyncs;
  out->full = st.full ? 1 : 0;
  auto p = sparrow::coll::stage_progress(*comm->coll);
  out->stagePending = p.pending ? 1 : 0;
  out->stageReady = p.ready ? 1 : 0;
  out->stageBytesReceived = p.bytes_received;
  out->stagedBytes = p.staged_bytes;
  out->catchUps = st.catchups;
  out->catchUpBytes = st.catchup_bytes;
  return sparrowSuccess;
}

namespace {

double peer_rtt(sparrow::Comm& c, int peer) {
  const auto& p = c.probe();
  const int me = c.rank();
  if (me == p.root && peer < int(p.rtt_s.size())) return p.rtt_s[peer];
  if (peer == p.root && me < int(p.rtt_s.size())) return p.rtt_s[me];
  return -1;
}

std::vector<sparrowPeerStats> peer_stats(sparrow::coll::Engine& e) {
  std::vector<sparrowPeerStats> v;
  const auto& peers = e.stats.peers;
  for (int r = 0; r < int(peers.size()); ++r) {
    const auto& p = peers[r];
    if (!p.sent && !p.received) continue;
    sparrowPeerStats s{};
    s.rank = r;
    s.bytesSent = p.sent;
    s.bytesReceived = p.received;
    s.firstByteSeconds = p.first_s;
    s.lastByteSeconds = p.last_s;
    s.receiveBytesPerSecond = p.last_s > p.first_s && p.first_s >= 0 ? double(p.received) / (p.last_s - p.first_s) : 0;
    s.rttSeconds = peer_rtt(e.comm, r);
    v.push_back(s);
  }
  return v;
}

std::string json_num(double x) {
  if (x < 0) return "null";
  char b[64];
  snprintf(b, sizeof b, "%.6g", x);
  return b;
}

// "codecs": the root's codec choice (see Stats::codec_link_Bps); null on a receiver.
std::string codecs_json(const sparrow::coll::Stats& st) {
  if (st.codec_link_Bps < 0) return "\"codecs\":null";
  using namespace sparrow::format;
  // {"name":chunks,...} over one codec family's counts.
  auto counts = [](const uint64_t* n, int size, auto name) {
    std::string o = "{";
    for (int i = 0; i < size; ++i) o += std::string(i ? "," : "") + "\"" + name(i) + "\":" + std::to_string(n[i]);
    return o + "}";
  };
  return "\"codecs\":{\"link_Bps\":" + json_num(st.codec_link_Bps) + ",\"index\":" +
         counts(st.index_codecs, kNumIndexCodecs, [](int i) { return index_codec_name(IndexCodec(i)); }) +
         ",\"values\":" +
         counts(st.value_codecs, kNumValueCodecs, [](int i) { return value_codec_name(ValueCodec(i)); }) + "}";
}

std::string stats_json(sparrow::coll::Engine& e) {
  const auto& st = e.stats;
  auto n = [](unsigned long long v) { return std::to_string(v); };
  std::string j = "{\"rank\":" + std::to_string(e.rank()) + ",\"op\":" + n(st.ops) + ",\"role\":\"" +
                  (st.ops == 0 ? "none" : st.is_root() ? "root" : "receiver") + "\",\"full\":" + (st.full ? "true" : "false") +
                  ",\"dense_bytes\":" + n(st.dense_bytes) + ",\"wire_bytes\":" + n(st.wire_bytes) +
                  ",\"changed\":" + n(st.changed) + ",\"density\":" + json_num(st.density) +
                  ",\"resyncs\":" + n(st.resyncs) + ",\"catch_ups\":" + n(st.catchups) + ",\"seconds\":{" +
                  "\"extract\":" + json_num(st.extract_s) + ",\"encode\":" + json_num(st.is_root() ? st.encode_s : -1) +
                  ",\"first_byte\":" + json_num(st.first_byte_s) + ",\"last_byte\":" + json_num(st.last_byte_s) +
                  ",\"verify\":" + json_num(st.verify_s) + ",\"decode\":" + json_num(st.decode_s) +
                  ",\"commit\":" + json_num(st.commit_s) + ",\"total\":" + json_num(st.total_s) + "},\"parent\":" +
                  (st.parent < 0 ? std::string("null") : std::to_string(st.parent)) + ",\"children\":[";
  for (size_t i = 0; i < st.children.size(); ++i) j += (i ? "," : "") + std::to_string(st.children[i]);
  j += "]," + codecs_json(st);
  j += std::string(",\"elastic\":") + (e.comm.elastic() ? "true" : "false") + ",\"members\":[";
  const std::vector<int> live = e.members.live();
  for (size_t i = 0; i < live.size(); ++i) j += (i ? "," : "") + std::to_string(live[i]);
  j += "],\"dropped\":" + n(e.members.drops()) + ",\"peers\":[";
  bool first = true;
  for (const auto& p : peer_stats(e)) {
    j += std::string(first ? "" : ",") + "{\"rank\":" + std::to_string(p.rank) + ",\"sent\":" + n(p.bytesSent) +
         ",\"received\":" + n(p.bytesReceived) + ",\"first_byte\":" + json_num(p.firstByteSeconds) +
         ",\"last_byte\":" + json_num(p.lastByteSeconds) + ",\"receive_Bps\":" + json_num(p.receiveBytesPerSecond) +
         ",\"rtt\":" + json_num(p.rttSeconds) + "}";
    first = false;
  }
  return j + "]}";
}

}  // namespace

SPARROW_EXPORT sparrowResult_t sparrowCommGetPeerStats(sparrowComm_t comm, sparrowPeerStats* peers, int maxPeers, int* npeers) {
  if (!comm || !npeers || maxPeers < 0 || (maxPeers > 0 && !peers))
    return invalid("sparrowCommGetPeerStats: NULL argument or negative maxPeers");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetPeerStats", comm));
  auto v = peer_stats(*comm->coll);
  for (int i = 0; i < maxPeers && i < int(v.size()); ++i) peers[i] = v[i];
  *npeers = int(v.size());
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommGetProgress(sparrowComm_t comm, unsigned long long* bytesReceived,
                                                      unsigned long long* bytesSent, int* inCall) {
  if (!comm) return invalid("sparrowCommGetProgress: NULL communicator");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetProgress", comm));
  auto& c = *comm->impl;
  if (bytesReceived) *bytesReceived = c.net().bytes_received();
  if (bytesSent) *bytesSent = c.net().bytes_sent();
  if (inCall) *inCall = comm->coll->in_call.load() > 0 ? 1 : 0;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowCommGetStatsJson(sparrowComm_t comm, char* buf, size_t len, size_t* needed) {
  if (!comm || (len && !buf)) return invalid("sparrowCommGetStatsJson: NULL argument");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowCommGetStatsJson", comm));
  const std::string j = stats_json(*comm->coll);
  if (needed) *needed = j.size() + 1;
  if (!buf && len == 0) return sparrowSuccess;  // asking for the size only
  if (len < j.size() + 1) return invalid("sparrowCommGetStatsJson: buffer too small (see *needed)");
  memcpy(buf, j.c_str(), j.size() + 1);
  return sparrowSuccess;
}

}  // extern "C"
