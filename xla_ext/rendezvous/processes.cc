#include "xla_ext/rendezvous/processes.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "xla_ext/rendezvous/channel_wire.h"
#include "xla_ext/rendezvous/sha256.h"

namespace jaxmg::processes {
namespace {

using Clock = std::chrono::steady_clock;
using wire::Header;
using wire::Kind;

// A blocked send that makes no progress this long means the peer stopped
// reading (stopped or wedged): the connection is given up.
constexpr auto kStallTimeout = std::chrono::seconds(60);
constexpr size_t kReadChunk = size_t{1} << 20;

//===--------------------------------------------------------------------===//
// Sockets
//===--------------------------------------------------------------------===//

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t k = ::send(fd, p, size, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    size -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t k = ::recv(fd, p, size, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    size -= static_cast<size_t>(k);
  }
  return true;
}

// Reads `size` bytes into `out`. Memory follows the bytes that actually
// arrive (a peer announcing more than it sends costs nothing) unless `exact`:
// the size was checked against what the call needs, so it is allocated once.
bool ReadBody(int fd, uint64_t size, bool exact, std::string* out) {
  try {
    out->clear();
    if (exact) {
      out->resize(size);
      return ReadAll(fd, out->data(), size);
    }
    while (out->size() < size) {
      const size_t at = out->size();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(size - at, kReadChunk));
      out->resize(at + take);
      if (!ReadAll(fd, out->data() + at, take)) return false;
    }
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

bool Discard(int fd, uint64_t size) {
  char sink[64 << 10];
  while (size > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(size, sizeof(sink)));
    if (!ReadAll(fd, sink, take)) return false;
    size -= take;
  }
  return true;
}

bool SetBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// Non-blocking fd: reads or writes exactly `size` bytes before `deadline`.
bool TransferWithin(int fd, void* data, size_t size, bool write, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t k = write ? ::send(fd, p, size, MSG_NOSIGNAL) : ::recv(fd, p, size, 0);
    if (k > 0) {
      p += k;
      size -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) return false;
  }
  return true;
}

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
};

bool PeerOf(int fd, Peer* peer) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  peer->pid = cred.pid;
  peer->uid = cred.uid;
  return true;
}

std::string DescribeUser(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[1024];
  std::ostringstream out;
  if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    out << "user " << found->pw_name << " (uid " << uid << ")";
  } else {
    out << "uid " << uid;
  }
  return out.str();
}

std::string SocketName(const std::string& job, int process) {
  return "jaxmg-" + job + "-" + std::to_string(process);
}

sockaddr_un Address(const std::string& job, int process, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: the name starts with NUL and never touches the disk.
  const std::string name = SocketName(job, process);
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

wire::Nonce NewNonce() {
  wire::Nonce n;
  size_t got = 0;
  while (got < n.size()) {
    const ssize_t k = ::getrandom(n.data() + got, n.size() - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) std::abort();  // no randomness: no safe channel either
    got += static_cast<size_t>(k);
  }
  return n;
}

// Opaque bytes for a message: printable ones as they are, others as \xNN.
std::string Printable(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char ch : bytes) {
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      out += "\\x";
      out += digits[ch >> 4];
      out += digits[ch & 15];
    }
  }
  return out;
}

//===--------------------------------------------------------------------===//
// Connections and state
//===--------------------------------------------------------------------===//

using MeetingKey = std::pair<int64_t, int64_t>;         // call, generation
using RequestKey = std::tuple<int64_t, int64_t, int>;  // call, generation, participant

struct Frame {
  Header h;
  std::string body;
};

// What a follower waits for on its connection to a leader.
struct Waiter {
  uint64_t reply_cap = 0;  // the most bytes its reply may take
  bool exact = false;      // the cap is what the transport needs
  std::deque<Frame> frames;
};

// An authenticated socket, shared by whoever still refers to it; closed with
// the last one.
struct Connection {
  Connection(int fd, int process, pid_t pid) : fd(fd), process(process), pid(pid) {}
  ~Connection() { ::close(fd); }
  const int fd;
  const int process;  // the peer's rank
  const pid_t pid;    // the peer's pid, for messages
  std::mutex write_mu;
  // Incoming side, under State::mu.
  bool closed = false;    // the peer hung up
  bool said_bye = false;  // it said goodbye first: it exits normally
  std::string broke;      // or it broke the protocol: how (closed by this side)
  int arrivals = 0;       // its arrivals waiting in the inbox
  // Outgoing side: the leader's answers, sorted by meeting by a reader thread,
  // so calls in flight at once never wait on each other's answers.
  std::mutex box_mu;
  std::condition_variable box_cv;
  std::map<MeetingKey, Waiter> box;
  std::set<MeetingKey> abandoned;  // meetings whose waiter gave up
  bool eof = false;
  bool leader_said_bye = false;
  std::string leader_broke;  // how the leader broke the protocol, if it did
};
using ConnectionPtr = std::shared_ptr<Connection>;

// A follower's arrival at a meeting, waiting in the leader's inbox.
struct Arrival {
  ConnectionPtr from;
  std::string signature;
  uint64_t request_bytes = 0;
  bool inline_request = false;
  std::string request;  // when inline
};

// A request the leader asked for once its meeting started.
struct Expected {
  ConnectionPtr from;
  uint64_t bytes = 0;
  bool exact = false;
  bool received = false;
  std::string body;
};
using ExpectedPtr = std::shared_ptr<Expected>;

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::string token;   // as given: "name:secret"
  std::string name;    // names the sockets (visible to every local user)
  std::string secret;  // proves a peer belongs to the job (never in a name, never sent)
  int process = -1;
  int listen_fd = -1;
  int wake_fd = -1;  // stops the acceptor
  std::thread acceptor;
  std::map<int64_t, std::vector<int32_t>> calls;
  std::map<int64_t, int64_t> arrivals;  // per call site: this process's runs so far
  // Leader side.
  std::map<RequestKey, Arrival> inbox;
  std::map<RequestKey, ExpectedPtr> expected;
  std::map<MeetingKey, std::string> aborted;  // failed meetings
  std::set<MeetingKey> leading;               // meetings this leader waits for
  std::map<int, ConnectionPtr> incoming;      // latest, by peer process
  std::set<ConnectionPtr> serving;            // every authenticated incoming connection
  // Follower side.
  std::map<int, ConnectionPtr> outgoing;  // by leader process
  int64_t failed = 0;
  std::set<int> lost;
  bool goodbye_registered = false;
};

State& state() {
  static auto* s = new State();
  return *s;
}

bool Send(Connection& c, Kind kind, int64_t call_id, int64_t generation, int32_t index, bool ok,
          const std::string& body) {
  Header h{wire::kMagic, kind, call_id, generation, index, ok ? 1 : 0, body.size()};
  std::lock_guard<std::mutex> lock(c.write_mu);
  if (WriteAll(c.fd, &h, sizeof(h)) && WriteAll(c.fd, body.data(), body.size())) return true;
  ::shutdown(c.fd, SHUT_RDWR);  // the peer notices, instead of reading half a frame
  return false;
}

std::string Bounded(const std::string& message) {
  return message.size() <= wire::kMaxMessage ? message : message.substr(0, wire::kMaxMessage);
}

void RememberAborted(State& s, int64_t call_id, int64_t generation, const std::string& why) {
  if (s.aborted.size() > 1024) s.aborted.erase(s.aborted.begin());
  s.aborted[{call_id, generation}] = why;
}

std::string Departure(const Connection& c) {
  if (!c.broke.empty()) return "it broke the channel's protocol (" + c.broke + ")";
  if (c.said_bye) return "it exited";
  return Errorf("it was killed or crashed (pid ", c.pid, "; its channel closed without a goodbye)")
      .message();
}

// Tells every peer that this process exits normally (at exit(), after the
// program's own shutdown): they then tell a clean exit from a crash.
void SayGoodbye() {
  State& s = state();
  std::vector<ConnectionPtr> all;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    all.assign(s.serving.begin(), s.serving.end());
    for (auto& [p, c] : s.outgoing) all.push_back(c);
  }
  for (auto& c : all) {
    Header h{wire::kMagic, wire::kBye, 0, 0, 0, 1, 0};
    std::unique_lock<std::mutex> lock(c->write_mu, std::try_to_lock);
    if (lock.owns_lock()) ::send(c->fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

//===--------------------------------------------------------------------===//
// Leader side: one thread per authenticated incoming connection
//===--------------------------------------------------------------------===//

// Why a meeting fails when follower `index` gives up waiting for it: who had
// not come yet (the leader counts as come once it waits in Lead).
std::string GaveUp(State& s, int64_t call_id, int64_t generation, int index, int process) {
  std::ostringstream out;
  out << "jaxmg: ";
  auto call = s.calls.find(call_id);
  if (call != s.calls.end()) {
    const std::vector<int32_t>& processes = call->second;
    const bool leader_here = s.leading.count({call_id, generation}) > 0;
    out << "participants [";
    const char* sep = "";
    for (int i = 0; i < static_cast<int>(processes.size()); ++i) {
      const bool here = i == 0 ? leader_here
                               : i == index || s.inbox.count({call_id, generation, i}) > 0;
      if (here) continue;
      out << sep << i << " (process " << processes[i] << (i == 0 ? ", the leader" : "") << ")";
      sep = ", ";
    }
    out << "] of " << processes.size() << " did not reach call " << call_id << " in time: ";
  }
  out << "participant " << index << " (process " << process << ") gave up waiting for call "
      << call_id << " to start. Every process of the mesh must execute the same jaxmg calls in "
      << "the same order; raise JAXMG_TIMEOUT_S if one is merely slow.";
  return out.str();
}

// Reads one follower's frames until it hangs up or breaks the protocol; an
// arrival goes to the inbox for its meeting, a request to the meeting that
// asked for it.
void Serve(ConnectionPtr c) {
  State& s = state();
  Header h;
  std::string bad;  // how the peer broke the protocol
  while (bad.empty() && ReadAll(c->fd, &h, sizeof(h))) {
    const RequestKey key{h.call_id, h.generation, h.index};
    if (h.magic != wire::kMagic) {
      bad = "a frame without the channel's magic";
    } else if (h.kind == wire::kBye && h.size == 0) {
      std::lock_guard<std::mutex> lock(s.mu);
      c->said_bye = true;
    } else if (h.index < 1) {
      bad = Errorf("a frame for participant ", h.index).message();
    } else if (h.kind == wire::kArrive && !h.ok) {
      // The follower could not even describe its buffers: the meeting fails.
      std::string why;
      if (h.size > wire::kMaxMessage) {
        bad = Errorf("an error message of ", h.size, " bytes").message();
      } else if (ReadBody(c->fd, h.size, true, &why)) {
        {
          std::lock_guard<std::mutex> lock(s.mu);
          RememberAborted(s, h.call_id, h.generation, why);
          s.cv.notify_all();
        }
        Send(*c, wire::kDone, h.call_id, h.generation, h.index, false, why);
      } else {
        break;
      }
    } else if (h.kind == wire::kArrive) {
      wire::Arrival a;
      std::string body;
      if (h.size < sizeof(a) || h.size > sizeof(a) + wire::kMaxSignature + wire::kInlineRequest) {
        bad = Errorf("an arrival of ", h.size, " bytes").message();
        break;
      }
      if (!ReadBody(c->fd, h.size, true, &body)) break;
      std::memcpy(&a, body.data(), sizeof(a));
      const bool inline_request = a.request_bytes <= wire::kInlineRequest;
      if (a.signature_bytes > wire::kMaxSignature ||
          h.size != sizeof(a) + a.signature_bytes + (inline_request ? a.request_bytes : 0)) {
        bad = "an arrival whose parts do not add up to its size";
        break;
      }
      Arrival arrival{c, body.substr(sizeof(a), a.signature_bytes), a.request_bytes,
                      inline_request,
                      inline_request ? body.substr(sizeof(a) + a.signature_bytes) : std::string()};
      std::unique_lock<std::mutex> lock(s.mu);
      auto late = s.aborted.find({h.call_id, h.generation});
      if (late != s.aborted.end()) {
        const std::string why = late->second;
        lock.unlock();
        Send(*c, wire::kDone, h.call_id, h.generation, h.index, false, why);
      } else if (c->arrivals >= wire::kMaxArrivalsPerPeer) {
        bad = Errorf("more than ", wire::kMaxArrivalsPerPeer, " arrivals waiting at once").message();
      } else if (s.inbox.count(key)) {
        bad = Errorf("a second arrival at run ", h.generation, " of call ", h.call_id).message();
      } else {
        c->arrivals += 1;
        s.inbox.emplace(key, std::move(arrival));
        s.cv.notify_all();
      }
    } else if (h.kind == wire::kRequest) {
      ExpectedPtr e;
      bool void_meeting = false;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        auto it = s.expected.find(key);
        if (it != s.expected.end() && it->second->from == c && !it->second->received) {
          e = it->second;
        } else {
          void_meeting = s.aborted.count({h.call_id, h.generation}) > 0;
        }
      }
      std::string body;
      if (e == nullptr && void_meeting && h.size <= kMaxPayloadBytes) {
        // The meeting failed after it asked for the request: read it past.
        if (!Discard(c->fd, h.size)) break;
      } else if (e == nullptr) {
        bad = Errorf("a request nobody asked for (run ", h.generation, " of call ", h.call_id, ")")
                  .message();
      } else if (h.size != e->bytes) {
        bad = Errorf("a request of ", h.size, " bytes after announcing ", e->bytes).message();
      } else if (ReadBody(c->fd, h.size, e->exact, &body)) {
        std::lock_guard<std::mutex> lock(s.mu);
        e->body = std::move(body);
        e->received = true;
        s.cv.notify_all();
      } else {
        break;
      }
    } else if (h.kind == wire::kCancel && h.size == 0) {
      std::unique_lock<std::mutex> lock(s.mu);
      auto it = s.inbox.find(key);
      if (it == s.inbox.end() || it->second.from != c) continue;  // started: it waits for the end
      s.inbox.erase(it);
      c->arrivals -= 1;
      const std::string why = GaveUp(s, h.call_id, h.generation, h.index, c->process);
      RememberAborted(s, h.call_id, h.generation, why);
      s.cv.notify_all();
      lock.unlock();
      Send(*c, wire::kDone, h.call_id, h.generation, h.index, false, why);
    } else {
      bad = Errorf("a frame of kind ", h.kind, " and ", h.size, " bytes").message();
    }
  }
  ::shutdown(c->fd, SHUT_RDWR);
  std::lock_guard<std::mutex> lock(s.mu);
  c->closed = true;
  c->broke = bad;
  s.serving.erase(c);
  if (!c->said_bye) s.lost.insert(c->process);
  // Arrivals of a peer that hung up are void: their meetings fail.
  for (auto it = s.inbox.begin(); it != s.inbox.end();) {
    if (it->second.from != c) {
      ++it;
      continue;
    }
    const auto& [call_id, generation, index] = it->first;
    RememberAborted(s, call_id, generation,
                    Errorf("jaxmg: participant ", index, " (process ", c->process, ") left call ",
                           call_id, " before it started: ", Departure(*c))
                        .message());
    it = s.inbox.erase(it);
  }
  s.cv.notify_all();
}

//===--------------------------------------------------------------------===//
// Leader side: the acceptor authenticates new connections
//===--------------------------------------------------------------------===//

// One connection in its handshake: fixed-size messages, non-blocking reads,
// a deadline; nothing is allocated or changed for it before it is through.
struct Greeting {
  int fd;
  Peer peer;
  Clock::time_point deadline;
  bool said_hello = false;
  size_t got = 0;
  union {
    wire::Hello hello;
    wire::Answer answer;
  } in;
  wire::Hello hello;
  wire::Nonce nonce;
};

enum class Step { kWaiting, kFailed, kAuthenticated };

Step Advance(Greeting& g, const std::string& job, const std::string& secret, int me) {
  const size_t need = g.said_hello ? sizeof(wire::Answer) : sizeof(wire::Hello);
  while (g.got < need) {
    const ssize_t k = ::recv(g.fd, reinterpret_cast<char*>(&g.in) + g.got, need - g.got, 0);
    if (k > 0) {
      g.got += static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::kWaiting;
    return Step::kFailed;
  }
  g.got = 0;
  if (!g.said_hello) {
    const wire::Hello h = g.in.hello;
    if (h.magic != wire::kMagic || h.version != wire::kVersion || h.leader != me ||
        h.follower < 0 || h.follower == me) {
      return Step::kFailed;
    }
    g.hello = h;
    g.nonce = NewNonce();
    wire::Challenge c{wire::kMagic, wire::kVersion, me, h.follower, g.nonce,
                      wire::Proof(secret, wire::Role::kLeader, job, me, h.follower, h.nonce,
                                  g.nonce)};
    if (::send(g.fd, &c, sizeof(c), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(c))) {
      return Step::kFailed;
    }
    g.said_hello = true;
    return Step::kWaiting;
  }
  const wire::Answer a = g.in.answer;
  const sha256::Digest want = wire::Proof(secret, wire::Role::kFollower, job, me,
                                          g.hello.follower, g.hello.nonce, g.nonce);
  if (a.magic != wire::kMagic || a.version != wire::kVersion || !sha256::Equal(a.proof, want)) {
    return Step::kFailed;
  }
  return Step::kAuthenticated;
}

// An authenticated connection joins the peers (before it hears the welcome,
// so a meeting that starts once it arrived sees it) and gets its reader.
void Admit(Greeting& g) {
  State& s = state();
  const timeval stall{static_cast<time_t>(kStallTimeout.count()), 0};
  ::setsockopt(g.fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall));
  if (!SetBlocking(g.fd)) {
    ::close(g.fd);
    return;
  }
  auto c = std::make_shared<Connection>(g.fd, g.hello.follower, g.peer.pid);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (static_cast<int>(s.serving.size()) >= wire::kMaxPeers) return;  // c closes the fd
    s.serving.insert(c);
    s.incoming[c->process] = c;
  }
  const wire::Welcome w{wire::kMagic, wire::kVersion};
  if (!WriteAll(c->fd, &w, sizeof(w))) ::shutdown(c->fd, SHUT_RDWR);  // its reader cleans up
  std::thread(Serve, c).detach();
}

void Accept(int listen_fd, int wake_fd, std::string job, std::string secret, int me) {
  std::deque<Greeting> greetings;  // oldest first
  const uid_t uid = ::getuid();
  while (true) {
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int timeout_ms = -1;
    const auto now = Clock::now();
    for (const Greeting& g : greetings) {
      fds.push_back({g.fd, POLLIN, 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(g.deadline - now).count();
      const int ms = static_cast<int>(std::max<int64_t>(0, left));
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    std::deque<Greeting> still;
    const auto after = Clock::now();
    for (size_t i = 0; i < greetings.size(); ++i) {
      Greeting& g = greetings[i];
      Step step = Step::kWaiting;
      if (fds[i + 2].revents != 0) step = Advance(g, job, secret, me);
      if (step == Step::kWaiting && after >= g.deadline) step = Step::kFailed;
      if (step == Step::kAuthenticated) {
        Admit(g);
      } else if (step == Step::kFailed) {
        ::close(g.fd);
      } else {
        still.push_back(g);
      }
    }
    greetings.swap(still);
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) break;
    if (!(fds[0].revents & POLLIN)) continue;
    while (true) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        break;  // EAGAIN: no more for now
      }
      // Only processes of this user may talk to the job at all.
      Peer peer;
      if (!PeerOf(fd, &peer) || peer.uid != uid) {
        ::close(fd);
        continue;
      }
      if (static_cast<int>(greetings.size()) >= wire::kMaxUnauthenticated) {
        // Full: read the hellos that came meanwhile, then the oldest that
        // has not even started one goes (a follower says it at once), else
        // the oldest.
        for (auto it = greetings.begin(); it != greetings.end();) {
          const Step step = it->said_hello ? Step::kWaiting : Advance(*it, job, secret, me);
          if (step == Step::kWaiting) {
            ++it;
            continue;
          }
          if (step == Step::kAuthenticated) {
            Admit(*it);
          } else {
            ::close(it->fd);
          }
          it = greetings.erase(it);
        }
      }
      if (static_cast<int>(greetings.size()) >= wire::kMaxUnauthenticated) {
        auto victim = std::find_if(greetings.begin(), greetings.end(),
                                   [](const Greeting& g) { return !g.said_hello && g.got == 0; });
        if (victim == greetings.end()) victim = greetings.begin();
        ::close(victim->fd);
        greetings.erase(victim);
      }
      Greeting g{};
      g.fd = fd;
      g.peer = peer;
      g.deadline = Clock::now() + wire::kHandshakeTimeout;
      greetings.push_back(g);
    }
  }
  for (Greeting& g : greetings) ::close(g.fd);
}

//===--------------------------------------------------------------------===//
// Follower side
//===--------------------------------------------------------------------===//

// Sorts the leader's answers on an outgoing connection into its box; a frame
// for no waiting meeting, or larger than its waiter allows, ends the
// connection.
void ReadAnswers(ConnectionPtr c) {
  Header h;
  std::string bad;
  while (bad.empty() && ReadAll(c->fd, &h, sizeof(h))) {
    if (h.magic != wire::kMagic) {
      bad = "a frame without the channel's magic";
      break;
    }
    if (h.kind == wire::kBye && h.size == 0) {
      std::lock_guard<std::mutex> lock(c->box_mu);
      c->leader_said_bye = true;
      continue;
    }
    if (h.kind != wire::kStarted && h.kind != wire::kDone) {
      bad = Errorf("a frame of kind ", h.kind, " and ", h.size, " bytes").message();
      break;
    }
    const MeetingKey key{h.call_id, h.generation};
    bool drop = false, exact = false;
    uint64_t cap = 0;
    {
      std::lock_guard<std::mutex> lock(c->box_mu);
      auto it = c->box.find(key);
      if (c->abandoned.count(key)) {
        drop = true;
        cap = kMaxPayloadBytes;
      } else if (it != c->box.end()) {
        cap = h.kind == wire::kStarted ? 0 : h.ok ? it->second.reply_cap : wire::kMaxMessage;
        exact = h.kind == wire::kDone && h.ok && it->second.exact;
      } else {
        bad = Errorf("an answer for run ", h.generation, " of call ", h.call_id,
                     ", which nobody waits for")
                  .message();
        break;
      }
    }
    if (h.size > cap) {
      bad = Errorf("a frame of ", h.size, " bytes where at most ", cap, " fit").message();
      break;
    }
    Frame f{h, {}};
    if (drop ? !Discard(c->fd, h.size) : !ReadBody(c->fd, h.size, exact, &f.body)) break;
    std::lock_guard<std::mutex> lock(c->box_mu);
    if (drop) {
      if (h.kind == wire::kDone) c->abandoned.erase(key);
      continue;
    }
    auto it = c->box.find(key);
    if (it == c->box.end()) continue;
    it->second.frames.push_back(std::move(f));
    c->box_cv.notify_all();
  }
  ::shutdown(c->fd, SHUT_RDWR);
  bool bye;
  {
    std::lock_guard<std::mutex> lock(c->box_mu);
    bye = c->leader_said_bye;
  }
  if (!bye) {
    std::lock_guard<std::mutex> lock(state().mu);
    state().lost.insert(c->process);
  }
  std::lock_guard<std::mutex> lock(c->box_mu);
  c->leader_broke = bad;
  c->eof = true;
  c->box_cv.notify_all();
}

enum class Dial { kConnected, kRetry, kRefuse };

// The follower's half of the handshake on a connected non-blocking socket.
Dial Handshake(int fd, const std::string& job, const std::string& secret, int me, int leader,
               Clock::time_point deadline) {
  wire::Hello hello{wire::kMagic, wire::kVersion, me, leader, NewNonce()};
  if (!TransferWithin(fd, &hello, sizeof(hello), true, deadline)) return Dial::kRetry;
  wire::Challenge c;
  if (!TransferWithin(fd, &c, sizeof(c), false, deadline)) return Dial::kRetry;
  const sha256::Digest want =
      wire::Proof(secret, wire::Role::kLeader, job, leader, me, hello.nonce, c.nonce);
  if (c.magic != wire::kMagic || c.version != wire::kVersion || c.leader != leader ||
      c.follower != me || !sha256::Equal(c.proof, want)) {
    return Dial::kRefuse;
  }
  wire::Answer a{wire::kMagic, wire::kVersion,
                 wire::Proof(secret, wire::Role::kFollower, job, leader, me, hello.nonce, c.nonce)};
  if (!TransferWithin(fd, &a, sizeof(a), true, deadline)) return Dial::kRetry;
  wire::Welcome w;
  if (!TransferWithin(fd, &w, sizeof(w), false, deadline)) return Dial::kRetry;
  if (w.magic != wire::kMagic || w.version != wire::kVersion) return Dial::kRefuse;
  return Dial::kConnected;
}

std::string Squatter(int me, int leader, const std::string& job, const Peer& peer,
                     bool other_user) {
  std::ostringstream out;
  out << "jaxmg: process " << me << " will not talk to the holder of process " << leader
      << "'s job channel (the call's leader; socket @" << SocketName(job, leader) << "): it is "
      << "process " << peer.pid << " of ";
  if (other_user) {
    out << DescribeUser(peer.uid) << ", while this job runs as " << DescribeUser(::getuid())
        << ". Another user's process took the name before process " << leader
        << " could. Nothing was sent to it.";
  } else {
    out << "this user, and it could not prove that it holds this job's secret: it is no "
        << "process of this job. It got only a greeting (no secret, no data).";
  }
  out << " Stop that process, or start the job again (a new job picks a new name).";
  return out.str();
}

Status Connect(int leader, Clock::time_point deadline, ConnectionPtr* out) {
  // One connection per leader: calls starting at once share the first one
  // (a second would look to the leader like the first one hanging up).
  static std::mutex connect_mu;
  std::lock_guard<std::mutex> connecting(connect_mu);
  State& s = state();
  std::string name, secret;
  int me;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.outgoing.find(leader);
    if (it != s.outgoing.end()) {
      *out = it->second;
      return Status::Ok();
    }
    name = s.name;
    secret = s.secret;
    me = s.process;
  }
  socklen_t len;
  const sockaddr_un addr = Address(name, leader, &len);
  std::string trouble;
  while (true) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Errorf("jaxmg: socket() failed: ", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      Peer peer;
      if (!PeerOf(fd, &peer)) {
        ::close(fd);
        return Errorf("jaxmg: could not read the credentials of process ", leader,
                      "'s job channel: ", std::strerror(errno));
      }
      if (peer.uid != ::getuid()) {
        ::close(fd);
        return Status::Error(Squatter(me, leader, name, peer, true));
      }
      const Dial dial = Handshake(fd, name, secret, me, leader,
                                  std::min(deadline, Clock::now() + wire::kHandshakeTimeout));
      if (dial == Dial::kRefuse) {
        ::close(fd);
        return Status::Error(Squatter(me, leader, name, peer, false));
      }
      if (dial == Dial::kConnected && SetBlocking(fd)) {
        const timeval stall{static_cast<time_t>(kStallTimeout.count()), 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall));
        auto c = std::make_shared<Connection>(fd, leader, peer.pid);
        std::lock_guard<std::mutex> lock(s.mu);
        s.outgoing[leader] = c;
        std::thread(ReadAnswers, c).detach();
        *out = c;
        return Status::Ok();
      }
      // Closed or silent during the handshake (the leader may have shed us
      // under a flood of connections): try again.
      ::close(fd);
      trouble = Errorf(" (process ", peer.pid, ", which holds its name, did not finish the "
                       "handshake)").message();
    } else {
      const int err = errno;
      ::close(fd);
      trouble = std::string(": ") + std::strerror(err);
    }
    if (Clock::now() >= deadline) {
      return Errorf("jaxmg: process ", me, " could not reach process ", leader,
                    " (the call's leader)", trouble,
                    ". Is that process running this program, and did it call jaxmg?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void DropOutgoing(const ConnectionPtr& c) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().outgoing.find(c->process);
  if (it != state().outgoing.end() && it->second == c) state().outgoing.erase(it);
  ::shutdown(c->fd, SHUT_RDWR);
}

// Registers what a follower waits for on `c` for one meeting; forgets it
// when the wait ends (unless the meeting was abandoned, whose late answers the
// reader then drops).
class Waiting {
 public:
  Waiting(ConnectionPtr c, MeetingKey key, uint64_t reply_cap, bool exact)
      : c_(std::move(c)), key_(key) {
    std::lock_guard<std::mutex> lock(c_->box_mu);
    Waiter& w = c_->box[key_];
    w.reply_cap = std::min(reply_cap, kMaxPayloadBytes);
    w.exact = exact;
  }
  ~Waiting() {
    std::lock_guard<std::mutex> lock(c_->box_mu);
    c_->box.erase(key_);
  }

 private:
  ConnectionPtr c_;
  MeetingKey key_;
};

//===--------------------------------------------------------------------===//
// The meeting
//===--------------------------------------------------------------------===//

std::string Missing(const std::vector<int32_t>& processes, const std::vector<bool>& here,
                    const std::vector<ConnectionPtr>& gone, int64_t call_id,
                    std::chrono::milliseconds timeout) {
  std::ostringstream out;
  out << "jaxmg: participants [";
  const char* sep = "";
  std::string why;
  for (size_t i = 0; i < here.size(); ++i) {
    if (!here[i]) {
      out << sep << i << " (process " << processes[i] << (gone[i] ? ", disconnected" : "") << ")";
      sep = ", ";
      if (gone[i] && why.empty()) {
        why = Errorf("process ", processes[i], " closed its channel: ", Departure(*gone[i]))
                  .message();
      }
    }
  }
  out << "] of " << here.size() << " did not reach call " << call_id;
  if (!why.empty()) {
    out << ": " << why << ".";
  } else {
    out << " within " << timeout.count() << " ms. Every process of the mesh must execute the "
        << "same jaxmg calls in the same order; raise JAXMG_TIMEOUT_S if one is merely slow.";
  }
  return out.str();
}

std::string Mismatch(int64_t call_id, const std::vector<int32_t>& processes, int i,
                     const std::string& theirs, const std::string& mine) {
  return Errorf("jaxmg: participant ", i, " (process ", processes[i],
                ") brought another call to call ", call_id, ": its signature is \"",
                Printable(theirs), "\", the leader's (participant 0, process ", processes[0],
                ") is \"", Printable(mine),
                "\". Every process of the mesh must make the same jaxmg calls, with the same "
                "dtypes and shapes, in the same order")
      .message();
}

// The first reason the meeting cannot go on with these arrivals, or "".
std::string Refusal(int64_t call_id, const std::vector<int32_t>& processes,
                    const std::vector<Arrival>& arrivals, const std::string& signature,
                    Transport& transport) {
  for (size_t i = 1; i < arrivals.size(); ++i) {
    const Arrival& a = arrivals[i];
    if (a.from->process != processes[i]) {
      return Errorf("jaxmg: participant ", i, " of call ", call_id, " arrived from process ",
                    a.from->process, ", but the call runs it in process ", processes[i])
          .message();
    }
    if (a.signature != signature) {
      return Mismatch(call_id, processes, static_cast<int>(i), a.signature, signature);
    }
    const uint64_t cap = transport.MaxRequestBytes(static_cast<int>(i));
    if (a.request_bytes > cap) {
      return Errorf("jaxmg: participant ", i, " (process ", processes[i], ") announced a request "
                    "of ", a.request_bytes, " bytes for call ", call_id, ", more than the ", cap,
                    " it can need")
          .message();
    }
  }
  return "";
}

Status Lead(int64_t call_id, int64_t generation, const std::vector<int32_t>& processes,
            void* mine, std::chrono::milliseconds timeout, Transport& transport,
            const rendezvous::LeaderWork& work, const Status& prior, const std::string& signature) {
  State& s = state();
  const int n = static_cast<int>(processes.size());
  std::vector<Arrival> arrivals(n);
  std::vector<bool> here(n, false);
  std::vector<ConnectionPtr> gone(n);
  here[0] = true;
  // Fails the meeting for every participant that arrived; `lock` holds s.mu.
  auto fail = [&](std::unique_lock<std::mutex>& lock, const std::string& why) {
    RememberAborted(s, call_id, generation, why);
    for (int i = 1; i < n; ++i) s.expected.erase({call_id, generation, i});
    s.failed += 1;
    lock.unlock();
    for (int i = 1; i < n; ++i) {
      if (here[i]) Send(*arrivals[i].from, wire::kDone, call_id, generation, i, false, why);
    }
    return Status::Error(why);
  };
  std::unique_lock<std::mutex> lock(s.mu);
  {
    const auto deadline = Clock::now() + timeout;
    auto withdrawn = [&]() -> const std::string* {
      auto it = s.aborted.find({call_id, generation});
      return it == s.aborted.end() ? nullptr : &it->second;
    };
    // Arrivals stay in the inbox until the meeting starts, so a follower's
    // cancel always withdraws its own arrival before that.
    auto arrived = [&] {
      bool all = true;
      for (int i = 1; i < n; ++i) {
        here[i] = s.inbox.count({call_id, generation, i}) > 0;
        if (here[i]) continue;
        auto c = s.incoming.find(processes[i]);
        gone[i] = c != s.incoming.end() && c->second->closed ? c->second : nullptr;
        all = false;
      }
      return all;
    };
    bool complete = false;
    s.leading.insert({call_id, generation});
    // A leader that failed before the meeting fails it at once; late
    // followers learn it from the aborted list.
    while (prior.ok() && !(complete = arrived())) {
      if (withdrawn()) break;
      if (std::any_of(gone.begin(), gone.end(), [](const ConnectionPtr& g) { return g; })) break;
      if (s.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        complete = arrived();
        break;
      }
    }
    s.leading.erase({call_id, generation});
    if (!prior.ok()) arrived();
    if (complete && withdrawn()) complete = false;
    for (int i = 1; i < n; ++i) {
      if (!here[i]) continue;
      auto it = s.inbox.find({call_id, generation, i});
      arrivals[i] = std::move(it->second);
      arrivals[i].from->arrivals -= 1;
      s.inbox.erase(it);
    }
    if (!complete) {
      return fail(lock, !prior.ok()  ? prior.message()
                        : withdrawn() ? *withdrawn()
                                      : Missing(processes, here, gone, call_id, timeout));
    }
  }
  // Everyone is here: check what they brought before anything else moves.
  if (signature.size() > wire::kMaxSignature) {
    return fail(lock, Errorf("jaxmg: the signature of call ", call_id, " has ", signature.size(),
                             " bytes, more than ", wire::kMaxSignature)
                          .message());
  }
  const std::string refusal = Refusal(call_id, processes, arrivals, signature, transport);
  if (!refusal.empty()) return fail(lock, refusal);
  std::vector<ExpectedPtr> asked(n);
  for (int i = 1; i < n; ++i) {
    if (arrivals[i].inline_request) continue;
    asked[i] = std::make_shared<Expected>();
    asked[i]->from = arrivals[i].from;
    asked[i]->bytes = arrivals[i].request_bytes;
    asked[i]->exact = transport.MaxRequestBytes(i) < kMaxPayloadBytes;
    s.expected[{call_id, generation, i}] = asked[i];
  }
  lock.unlock();
  for (int i = 1; i < n; ++i) {
    Send(*arrivals[i].from, wire::kStarted, call_id, generation, i, true, "");
  }
  lock.lock();
  {
    // Requests too large to travel with the arrival come now.
    const auto deadline = Clock::now() + timeout;
    auto missing = [&]() -> int {
      for (int i = 1; i < n; ++i) {
        if (asked[i] && !asked[i]->received) return i;
      }
      return 0;
    };
    auto departed = [&]() -> int {
      for (int i = 1; i < n; ++i) {
        if (arrivals[i].from->closed) return i;
      }
      return 0;
    };
    while (missing() && !departed()) {
      if (s.cv.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
    if (const int i = departed()) {
      return fail(lock, Errorf("jaxmg: participant ", i, " (process ", processes[i],
                               ") left call ", call_id, " as it started: ",
                               Departure(*arrivals[i].from))
                            .message());
    }
    if (const int i = missing()) {
      return fail(lock, Errorf("jaxmg: participant ", i, " (process ", processes[i],
                               ") did not send its request for call ", call_id, " within ",
                               timeout.count(), " ms of the start")
                            .message());
    }
    for (int i = 1; i < n; ++i) {
      if (asked[i]) {
        arrivals[i].request = std::move(asked[i]->body);
        s.expected.erase({call_id, generation, i});
      }
    }
  }
  lock.unlock();

  std::vector<void*> payloads(n, nullptr);
  payloads[0] = mine;
  Status result;
  for (int i = 1; i < n && result.ok(); ++i) {
    result = transport.Import(i, arrivals[i].request, &payloads[i]);
  }
  if (result.ok()) result = rendezvous::RunLeaderWork(work, payloads);
  if (result.ok()) {
    // A participant that died during the work fails it for everyone.
    lock.lock();
    for (int i = 1; i < n && result.ok(); ++i) {
      if (arrivals[i].from->closed) {
        result = Errorf("jaxmg: participant ", i, " (process ", processes[i], ") left call ",
                        call_id, " during the work: ", Departure(*arrivals[i].from),
                        "; no participant keeps a result");
      }
    }
    lock.unlock();
  }
  for (int i = 1; i < n; ++i) {
    std::string reply;
    Status mine_ok = result.ok() ? transport.Reply(i, &reply) : result;
    if (!mine_ok.ok() && result.ok()) result = mine_ok;
    Send(*arrivals[i].from, wire::kDone, call_id, generation, i, mine_ok.ok(),
         mine_ok.ok() ? reply : Bounded(mine_ok.message()));
  }
  if (!result.ok()) {
    lock.lock();
    s.failed += 1;
  }
  return result;
}

Status Follow(int64_t call_id, int64_t generation, const std::vector<int32_t>& processes,
              int index, std::chrono::milliseconds timeout, Transport& transport,
              const Status& prior, const std::string& signature) {
  State& s = state();
  const int leader = processes[0];
  const auto deadline = Clock::now() + timeout;
  std::string request;
  Status exported = prior.ok() ? transport.Export(&request) : prior;
  if (exported.ok() && signature.size() > wire::kMaxSignature) {
    exported = Errorf("jaxmg: the signature of call ", call_id, " has ", signature.size(),
                      " bytes, more than ", wire::kMaxSignature);
  }
  if (exported.ok() && request.size() > kMaxPayloadBytes) {
    exported = Errorf("jaxmg: participant ", index, "'s request for call ", call_id, " has ",
                      request.size(), " bytes, more than the channel carries");
  }
  auto failed = [&](Status why) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.failed += 1;
    return why;
  };
  ConnectionPtr c;
  if (Status st = Connect(leader, deadline, &c); !st.ok()) return failed(st);
  const auto closed = [&] {
    std::string broke;
    bool bye;
    {
      std::lock_guard<std::mutex> lock(c->box_mu);
      broke = c->leader_broke;
      bye = c->leader_said_bye;
    }
    DropOutgoing(c);
    if (!broke.empty()) {
      return failed(Errorf("jaxmg: process ", leader, " (the leader of call ", call_id,
                           ") broke the channel's protocol (", broke,
                           "); this process closed the connection"));
    }
    return failed(Errorf("jaxmg: process ", leader, " (the leader of call ", call_id,
                         ") closed its channel: ", bye ? "it exited" : "it was killed or crashed",
                         " (pid ", c->pid, bye ? ")" : "; no goodbye)"));
  };
  const MeetingKey key{call_id, generation};
  const uint64_t reply_cap = transport.MaxReplyBytes();
  Waiting waiting(c, key, reply_cap, reply_cap < kMaxPayloadBytes);
  const bool inline_request = request.size() <= wire::kInlineRequest;
  std::string body;
  if (exported.ok()) {
    const wire::Arrival a{request.size(), static_cast<uint32_t>(signature.size()), 0};
    body.append(reinterpret_cast<const char*>(&a), sizeof(a));
    body += signature;
    if (inline_request) body += request;
  } else {
    // A failed export still goes to the leader, so every participant fails
    // now rather than at the timeout.
    body = Bounded(exported.message());
  }
  if (!Send(*c, wire::kArrive, call_id, generation, index, exported.ok(), body)) return closed();
  bool started = false, cancelled = false;
  Clock::time_point grace;
  while (true) {
    Frame f;
    bool got = false, eof = false;
    {
      std::unique_lock<std::mutex> lock(c->box_mu);
      auto ready = [&] {
        auto it = c->box.find(key);
        return (it != c->box.end() && !it->second.frames.empty()) || c->eof;
      };
      // Until the meeting starts the arrival deadline holds; the work itself
      // may take as long as it needs, but a leader that dies is noticed.
      if (started) {
        c->box_cv.wait(lock, ready);
      } else {
        c->box_cv.wait_until(lock, cancelled ? grace : deadline, ready);
      }
      auto it = c->box.find(key);
      if (it != c->box.end() && !it->second.frames.empty()) {
        f = std::move(it->second.frames.front());
        it->second.frames.pop_front();
        got = true;
      }
      eof = c->eof;
    }
    if (!got) {
      if (eof) return closed();
      if (!cancelled) {
        // Withdraw the arrival; the leader's answer settles whether the
        // meeting failed or had just started.
        cancelled = true;
        grace = Clock::now() + std::chrono::seconds(10);
        if (Send(*c, wire::kCancel, call_id, generation, index, true, "")) continue;
        return closed();
      }
      // The leader does not even answer the cancel. Other calls may share
      // this connection, so it stays open; this meeting's late answers are
      // dropped (the cancel, read in order, withdraws the arrival first).
      {
        std::lock_guard<std::mutex> lock(c->box_mu);
        c->abandoned.insert(key);
      }
      return failed(Errorf("jaxmg: participant ", index, " (process ", processes[index],
                           ") waited ", timeout.count(), " ms for call ", call_id,
                           " to start; its leader, process ", leader, ", does not answer"));
    }
    if (f.h.kind == wire::kStarted) {
      started = true;
      if (exported.ok() && !inline_request &&
          !Send(*c, wire::kRequest, call_id, generation, index, true, request)) {
        return closed();
      }
    } else if (f.h.kind == wire::kDone) {
      if (!f.h.ok && cancelled && !started) {
        const std::string said = f.body.rfind("jaxmg: ", 0) == 0 ? f.body.substr(7) : f.body;
        return failed(Errorf("jaxmg: participant ", index, " (process ", processes[index],
                             ") waited ", timeout.count(), " ms for call ", call_id,
                             " to start; its leader, process ", leader, ", says: ", said));
      }
      if (!f.h.ok) return failed(Status::Error(f.body));
      if (!exported.ok()) return failed(exported);
      Status applied = transport.Apply(f.body);
      return applied.ok() ? applied : failed(applied);
    }
  }
}

void CloseChannel(State& s, std::unique_lock<std::mutex>& lock) {
  // The name is free again only once the old acceptor has stopped.
  uint64_t one = 1;
  if (::write(s.wake_fd, &one, sizeof(one)) < 0) ::shutdown(s.listen_fd, SHUT_RDWR);
  std::thread acceptor = std::move(s.acceptor);
  lock.unlock();
  if (acceptor.joinable()) acceptor.join();
  lock.lock();
  ::close(s.listen_fd);
  ::close(s.wake_fd);
  s.listen_fd = s.wake_fd = -1;
  for (auto& [p, c] : s.outgoing) ::shutdown(c->fd, SHUT_RDWR);
  for (const ConnectionPtr& c : s.serving) ::shutdown(c->fd, SHUT_RDWR);
  s.outgoing.clear();
  s.calls.clear();
  s.arrivals.clear();
}

// Who holds the channel name `job`/`process`, for the message of a failed bind.
std::string Holder(const std::string& job, int process) {
  const std::string name = "@" + SocketName(job, process);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len;
  const sockaddr_un addr = Address(job, process, &len);
  Peer peer;
  const bool known = fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0 &&
                     PeerOf(fd, &peer);
  if (fd >= 0) ::close(fd);
  if (!known) return "the name " + name + " is already bound by a process that does not listen";
  if (peer.uid != ::getuid()) {
    return Errorf("the name ", name, " is held by process ", peer.pid, " of ",
                  DescribeUser(peer.uid), ", another user than this job's (",
                  DescribeUser(::getuid()), "). Nothing of this job was sent to it. Stop that "
                  "process, or start the job again (a new job picks a new name)")
        .message();
  }
  return Errorf("the name ", name, " is held by process ", peer.pid, " of this user: another "
                "process of this job has the same rank, or a process outside the job took the "
                "name")
      .message();
}

}  // namespace

Status Open(const std::string& token, int process_index) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  const size_t colon = token.find(':');
  const std::string name = token.substr(0, colon);
  const std::string secret = colon == std::string::npos ? name : token.substr(colon + 1);
  if (name.empty() || name.size() > 64 || secret.empty() || process_index < 0) {
    return Status::Error(
        "jaxmg: a job channel needs a token \"name:secret\" (name of 1-64 characters) and a "
        "rank >= 0");
  }
  if (s.listen_fd >= 0 && s.token == token && s.process == process_index) return Status::Ok();
  if (s.listen_fd >= 0) CloseChannel(s, lock);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errorf("jaxmg: socket() failed: ", std::strerror(errno));
  socklen_t len;
  const sockaddr_un addr = Address(name, process_index, &len);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(fd, 64) != 0) {
    const int err = errno;
    ::close(fd);
    return Errorf("jaxmg: process ", process_index, " could not open its job channel: ",
                  err == EADDRINUSE ? Holder(name, process_index) : std::strerror(err));
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return Errorf("jaxmg: eventfd() failed: ", std::strerror(errno));
  }
  s.token = token;
  s.name = name;
  s.secret = secret;
  s.process = process_index;
  s.listen_fd = fd;
  s.wake_fd = wake;
  s.acceptor = std::thread(Accept, fd, wake, name, secret, process_index);
  if (!s.goodbye_registered) {
    s.goodbye_registered = true;
    std::atexit(SayGoodbye);
  }
  return Status::Ok();
}

int ProcessIndex() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().process;
}

void RegisterCall(int64_t call_id, std::vector<int32_t> processes) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().calls[call_id] = std::move(processes);
}

bool CallProcesses(int64_t call_id, std::vector<int32_t>* processes) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().calls.find(call_id);
  if (it == state().calls.end()) return false;
  *processes = it->second;
  return true;
}

Status Meet(int64_t call_id, const std::vector<int32_t>& processes, void* mine,
            std::chrono::milliseconds arrival_timeout, Transport& transport,
            const rendezvous::LeaderWork& work, const Status& prior,
            const std::string& signature) {
  State& s = state();
  int64_t generation;
  int me;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.listen_fd < 0) {
      return Status::Error("jaxmg: this process has no job channel; jaxmg opens it when a mesh "
                           "spans processes (after jax.distributed.initialize)");
    }
    me = s.process;
    generation = s.arrivals[call_id]++;
  }
  const auto it = std::find(processes.begin(), processes.end(), me);
  if (it == processes.end()) {
    return Errorf("jaxmg: process ", me, " runs call ", call_id, " but holds none of its devices");
  }
  if (std::count(processes.begin(), processes.end(), me) != 1) {
    return Errorf("jaxmg: process ", me, " holds several devices of call ", call_id,
                  "; across processes jaxmg takes one device per process");
  }
  const int index = static_cast<int>(it - processes.begin());
  if (index == 0) {
    return Lead(call_id, generation, processes, mine, arrival_timeout, transport, work, prior,
                signature);
  }
  return Follow(call_id, generation, processes, index, arrival_timeout, transport, prior,
                signature);
}

Stats GetStats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return Stats{static_cast<int64_t>(s.serving.size() + s.outgoing.size()),
               static_cast<int64_t>(s.inbox.size() + s.expected.size()),
               static_cast<int64_t>(s.calls.size()), s.failed,
               static_cast<int64_t>(s.lost.size())};
}

}  // namespace jaxmg::processes
