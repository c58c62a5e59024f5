// The transport layer: frames between ranks.
//
// A backend (tcp, ucx, loopback) moves *frames* over *connections*: a frame is a fixed header naming
// (comm, op sequence, sub-op, fragment) plus a payload. Backends know nothing about messages or
// striping; the Channel (channel.h) splits a message into fragments over N connections to one peer and
// reassembles them in the peer's Mailbox. Every frame carries (comm, seq, sub), so concurrent
// operations never cross-talk.
//
// Threading: a backend runs its own progress thread(s). FrameSink callbacks run on them and must not
// block. Conn::send may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

constexpr uint32_t kFrameMagic = 0x52465053;  // "SPFR"
constexpr size_t kFrameHeaderBytes = 56;

struct MsgKey {
  uint64_t comm = 0;
  uint64_t seq = 0;
  uint32_t sub = 0;
  bool operator==(const MsgKey&) const = default;
  bool operator<(const MsgKey& o) const {
    return comm != o.comm ? comm < o.comm : seq != o.seq ? seq < o.seq : sub < o.sub;
  }
};

// What a message is, in words, for error messages ("the acknowledgement of operation 7 from ..."): the
// layer that defines the sub-operations (the collectives) installs one; the default names the numbers.
using KeyNamer = std::string (*)(const MsgKey& k);
void set_key_namer(KeyNamer f);
std::string describe_key(const MsgKey& k);

struct FrameHeader {
  MsgKey key;
  uint32_t frag = 0;     // fragment index within the message
  uint64_t offset = 0;   // byte offset of this fragment in the message
  uint64_t total = 0;    // message length
  uint32_t len = 0;      // payload bytes in this frame
  void encode(uint8_t out[kFrameHeaderBytes]) const;
  // Validates magic and internal consistency (offset + len <= total).
  static Result<FrameHeader> decode(const uint8_t in[kFrameHeaderBytes]);
};

// Bytes to send. `data` must stay valid until `done` runs; `keepalive` (if set) is held until then.
struct Payload {
  const uint8_t* data = nullptr;
  size_t len = 0;
  std::shared_ptr<const void> keepalive;
};

class Conn;

// Where a backend delivers incoming frames. begin() returns the destination for `h.len` bytes (the
// backend writes the payload there), or an error that fails the connection (protocol violation).
// Every frame_begin is followed by its frame_end or by conn_failed, and once conn_failed returns the
// backend writes nothing more into what frame_begin gave that connection: a receiver that gave up
// relies on it to know when its buffer is its own again.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual Result<uint8_t*> frame_begin(Conn* c, const FrameHeader& h) = 0;
  virtual void frame_end(Conn* c, const FrameHeader& h) = 0;
  // The connection failed (peer closed, reset, protocol error, abort). Called at most once.
  virtual void conn_failed(Conn* c, const Status& why) = 0;
};

using SendDone = std::function<void(const Status&)>;

class Conn {
 public:
  virtual ~Conn() = default;
  // Queues one frame. `done` runs once the payload may be reused, with the error if the connection
  // failed first: on a progress thread, or inline on the calling thread (so the caller must not hold
  // a lock that `done` takes).
  virtual void send(const FrameHeader& h, Payload p, SendDone done) = 0;
  // Bytes queued and not yet handed to the network: the striping channel's measure of "free".
  virtual size_t queued_bytes() const = 0;
  virtual void close() = 0;
  virtual int peer_rank() const = 0;
  virtual std::string peer_address() const = 0;
  virtual int stream() const = 0;
  // What protects this connection's frames after the handshake: "off", "integrity" or "on" (seal.h).
  virtual const char* protection() const { return "off"; }
};
using ConnPtr = std::shared_ptr<Conn>;

// Who we are and what proves it. The secret never travels: connections run a mutual HMAC challenge.
struct Identity {
  uint64_t comm_id = 0;
  int rank = -1;
  std::vector<uint8_t> secret;  // 16 bytes
};

// Called on a progress thread for every authenticated incoming connection. Returns the sink for its
// frames, or nullptr to refuse it (unknown rank, duplicate stream): the backend then closes it.
using AcceptHandler = std::function<FrameSink*(const ConnPtr& conn)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Starts listening (port 0: the kernel picks) and returns the address to publish.
  virtual Result<std::string> listen(AcceptHandler on_accept) = 0;
  // Connects and authenticates stream `stream` to the peer at `address`, delivering frames to sink.
  virtual Result<ConnPtr> connect(const std::string& address, int peer_rank, int stream, FrameSink* sink,
                                  Deadline deadline) = 0;
  // Fails every connection and wait; idempotent.
  virtual void abort(const Status& why) = 0;
};

struct BackendOptions {
  Identity identity;
  std::string bind_host;  // address to listen on and advertise
};

// Registry: backends by name and priority. SPARROW_TRANSPORT picks one; default: the highest-priority
// backend that can be created.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const BackendOptions&)>;
void register_backend(const std::string& name, int priority, BackendFactory f);
std::vector<std::string> backend_names();  // by descending priority
Result<std::unique_ptr<Backend>> create_backend(const std::string& name, const BackendOptions& o);
// SPARROW_TRANSPORT, or "auto".
std::string configured_transport();
Result<std::unique_ptr<Backend>> create_configured_backend(const BackendOptions& o);

// Per-stream socket settings shared by the TCP backend and the bootstrap.
double timeout_seconds();  // SPARROW_TIMEOUT_S

}  // namespace sparrow::transport
