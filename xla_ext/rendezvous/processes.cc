#include "xla_ext/rendezvous/processes.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <set>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

namespace jaxmg::processes {
namespace {

using Clock = std::chrono::steady_clock;

// A follower that gives up waiting sends kCancel instead of hanging up: its
// leader then either withdraws the request (and fails the meeting) or has
// already started it, and the follower waits for the end like everyone else.
enum Kind : uint32_t { kHello = 1, kRequest = 2, kStarted = 3, kDone = 4, kCancel = 5 };
constexpr uint32_t kMagic = 0x6a786d67;  // "jxmg"

struct Header {
  uint32_t magic;
  uint32_t kind;
  int64_t call_id;
  int64_t generation;
  int32_t index;  // participant (hello: process)
  int32_t ok;
  uint64_t size;  // bytes of body that follow
};

struct Frame {
  Header h;
  std::string body;
};

// A socket shared by whoever still refers to it; closed with the last one.
struct Connection {
  explicit Connection(int fd, int process) : fd(fd), process(process) {}
  ~Connection() { ::close(fd); }
  const int fd;
  int process;             // the peer's process index (-1 until hello)
  bool closed = false;     // the peer hung up (incoming side)
  std::mutex write_mu;
  // Outgoing side: the leader's answers, sorted by meeting by a reader thread,
  // so calls in flight at once never wait on each other's answers.
  std::mutex box_mu;
  std::condition_variable box_cv;
  std::map<std::pair<int64_t, int64_t>, std::deque<Frame>> box;
  std::set<std::pair<int64_t, int64_t>> abandoned;  // meetings whose waiter gave up
  bool eof = false;
};
using ConnectionPtr = std::shared_ptr<Connection>;

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

bool Send(Connection& c, Kind kind, int64_t call_id, int64_t generation, int32_t index, bool ok,
          const std::string& body) {
  Header h{kMagic, kind, call_id, generation, index, ok ? 1 : 0, body.size()};
  std::lock_guard<std::mutex> lock(c.write_mu);
  return WriteAll(c.fd, &h, sizeof(h)) && WriteAll(c.fd, body.data(), body.size());
}

bool Receive(int fd, Frame* f) {
  if (!ReadAll(fd, &f->h, sizeof(f->h)) || f->h.magic != kMagic) return false;
  if (f->h.size > (uint64_t{1} << 40)) return false;
  f->body.resize(f->h.size);
  return ReadAll(fd, f->body.data(), f->body.size());
}

sockaddr_un Address(const std::string& job, int process, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: the name starts with NUL and never touches the disk.
  const std::string name = "jaxmg-" + job + "-" + std::to_string(process);
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

using RequestKey = std::tuple<int64_t, int64_t, int>;  // call, generation, participant

struct Request {
  std::string body;
  ConnectionPtr from;
};

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::string token;   // as given: "name:secret"
  std::string name;    // names the sockets (visible to every local user)
  std::string secret;  // proves a peer belongs to the job (never in a name)
  int process = -1;
  int listen_fd = -1;
  std::thread acceptor;
  std::map<int64_t, std::vector<int32_t>> calls;
  std::map<int64_t, int64_t> arrivals;  // per call site: this process's runs so far
  // Leader side.
  std::map<RequestKey, Request> inbox;
  std::map<std::pair<int64_t, int64_t>, std::string> aborted;  // failed meetings
  std::map<int, ConnectionPtr> incoming;                       // latest, by peer process
  int64_t incoming_open = 0;
  // Follower side.
  std::map<int, ConnectionPtr> outgoing;  // by leader process
};

State& state() {
  static auto* s = new State();
  return *s;
}

std::string Secret() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().secret;
}

void RememberAborted(State& s, int64_t call_id, int64_t generation, const std::string& why) {
  if (s.aborted.size() > 1024) s.aborted.erase(s.aborted.begin());
  s.aborted[{call_id, generation}] = why;
}

// One incoming connection: requests go to the inbox for their meeting.
void Serve(ConnectionPtr c) {
  State& s = state();
  Frame f;
  while (Receive(c->fd, &f)) {
    if (f.h.kind == kHello) {
      if (f.body != Secret()) break;  // not this job's process: refuse it
      std::lock_guard<std::mutex> lock(s.mu);
      c->process = f.h.index;
      s.incoming[c->process] = c;
    } else if (f.h.kind == kRequest && c->process >= 0 && !f.h.ok) {
      // The follower could not even describe its buffers: the meeting fails.
      std::unique_lock<std::mutex> lock(s.mu);
      RememberAborted(s, f.h.call_id, f.h.generation, f.body);
      s.cv.notify_all();
      lock.unlock();
      Send(*c, kDone, f.h.call_id, f.h.generation, f.h.index, false, f.body);
    } else if (f.h.kind == kRequest && c->process >= 0) {
      std::unique_lock<std::mutex> lock(s.mu);
      auto late = s.aborted.find({f.h.call_id, f.h.generation});
      if (late != s.aborted.end()) {
        const std::string why = late->second;
        lock.unlock();
        Send(*c, kDone, f.h.call_id, f.h.generation, f.h.index, false, why);
        continue;
      }
      s.inbox[{f.h.call_id, f.h.generation, f.h.index}] = Request{std::move(f.body), c};
      s.cv.notify_all();
    } else if (f.h.kind == kCancel && c->process >= 0) {
      std::unique_lock<std::mutex> lock(s.mu);
      auto it = s.inbox.find({f.h.call_id, f.h.generation, f.h.index});
      if (it == s.inbox.end()) continue;  // already started: the follower waits for the end
      s.inbox.erase(it);
      const std::string why = Errorf("jaxmg: participant ", f.h.index, " (process ", c->process,
                                     ") gave up waiting for call ", f.h.call_id,
                                     " to start: not every participant arrived in time")
                                  .message();
      RememberAborted(s, f.h.call_id, f.h.generation, why);
      s.cv.notify_all();
      lock.unlock();
      Send(*c, kDone, f.h.call_id, f.h.generation, f.h.index, false, why);
    } else {
      break;
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  c->closed = true;
  s.incoming_open -= 1;
  // Requests of a peer that hung up are void: their meetings fail.
  for (auto it = s.inbox.begin(); it != s.inbox.end();) {
    if (it->second.from != c) {
      ++it;
      continue;
    }
    const auto& [call_id, generation, index] = it->first;
    RememberAborted(s, call_id, generation,
                    Errorf("jaxmg: participant ", index, " (process ", c->process,
                           ") left call ", call_id, " before it started: it exited or crashed")
                        .message());
    it = s.inbox.erase(it);
  }
  s.cv.notify_all();
}

void Accept(int listen_fd) {
  while (true) {
    int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // the listener was shut down
    }
    // Only processes of this user may talk to the job at all.
    ucred peer{};
    socklen_t peer_len = sizeof(peer);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 || peer.uid != ::getuid()) {
      ::close(fd);
      continue;
    }
    auto c = std::make_shared<Connection>(fd, -1);
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().incoming_open += 1;
    }
    std::thread(Serve, c).detach();
  }
}

// Sorts the leader's answers on an outgoing connection into its box.
void ReadAnswers(ConnectionPtr c) {
  Frame f;
  while (Receive(c->fd, &f)) {
    std::lock_guard<std::mutex> lock(c->box_mu);
    const std::pair<int64_t, int64_t> key{f.h.call_id, f.h.generation};
    if (c->abandoned.count(key)) {  // nobody waits for it any more
      if (f.h.kind == kDone) c->abandoned.erase(key);
      continue;
    }
    c->box[key].push_back(std::move(f));
    c->box_cv.notify_all();
  }
  std::lock_guard<std::mutex> lock(c->box_mu);
  c->eof = true;
  c->box_cv.notify_all();
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
  while (true) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errorf("jaxmg: socket() failed: ", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      auto c = std::make_shared<Connection>(fd, leader);
      if (!Send(*c, kHello, 0, 0, me, true, secret)) {
        return Errorf("jaxmg: could not greet process ", leader, ": ", std::strerror(errno));
      }
      std::lock_guard<std::mutex> lock(s.mu);
      s.outgoing[leader] = c;
      std::thread(ReadAnswers, c).detach();
      *out = c;
      return Status::Ok();
    }
    const int err = errno;
    ::close(fd);
    if (Clock::now() >= deadline) {
      return Errorf("jaxmg: process ", me, " could not reach process ", leader,
                    " (the call's leader): ", std::strerror(err),
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

std::string Missing(const std::vector<int32_t>& processes, const std::vector<bool>& here,
                    const std::vector<bool>& gone, int64_t call_id,
                    std::chrono::milliseconds timeout) {
  std::ostringstream out;
  out << "jaxmg: participants [";
  const char* sep = "";
  bool any_gone = false;
  for (size_t i = 0; i < here.size(); ++i) {
    if (!here[i]) {
      out << sep << i << " (process " << processes[i] << (gone[i] ? ", disconnected" : "") << ")";
      sep = ", ";
      any_gone = any_gone || gone[i];
    }
  }
  out << "] of " << here.size() << " did not reach call " << call_id;
  if (any_gone) {
    out << ": a process closed its channel (it exited or crashed).";
  } else {
    out << " within " << timeout.count() << " ms. Every process of the mesh must execute the "
        << "same jaxmg calls in the same order; raise JAXMG_TIMEOUT_S if one is merely slow.";
  }
  return out.str();
}

Status Lead(int64_t call_id, int64_t generation, const std::vector<int32_t>& processes,
            void* mine, std::chrono::milliseconds timeout, Transport& transport,
            const rendezvous::LeaderWork& work, const Status& prior) {
  State& s = state();
  const int n = static_cast<int>(processes.size());
  std::vector<Request> requests(n);
  std::vector<bool> here(n, false), gone(n, false);
  here[0] = true;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    const auto deadline = Clock::now() + timeout;
    auto withdrawn = [&]() -> const std::string* {
      auto it = s.aborted.find({call_id, generation});
      return it == s.aborted.end() ? nullptr : &it->second;
    };
    // Requests stay in the inbox until the meeting starts, so a follower's
    // cancel always withdraws its own request before that.
    auto arrived = [&] {
      bool all = true;
      for (int i = 1; i < n; ++i) {
        here[i] = s.inbox.count({call_id, generation, i}) > 0;
        if (here[i]) continue;
        auto c = s.incoming.find(processes[i]);
        gone[i] = c != s.incoming.end() && c->second->closed;
        all = false;
      }
      return all;
    };
    bool complete = false;
    // A leader that failed before the meeting fails it at once; late
    // followers learn it from the aborted list.
    while (prior.ok() && !(complete = arrived())) {
      if (withdrawn()) break;
      if (std::any_of(gone.begin(), gone.end(), [](bool g) { return g; })) break;
      if (s.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        complete = arrived();
        break;
      }
    }
    if (!prior.ok()) arrived();
    if (complete && withdrawn()) complete = false;
    for (int i = 1; i < n; ++i) {
      if (!here[i]) continue;
      auto it = s.inbox.find({call_id, generation, i});
      requests[i] = std::move(it->second);
      s.inbox.erase(it);
    }
    if (!complete) {
      const std::string why = !prior.ok()  ? prior.message()
                              : withdrawn() ? *withdrawn()
                                            : Missing(processes, here, gone, call_id, timeout);
      RememberAborted(s, call_id, generation, why);
      lock.unlock();
      for (int i = 1; i < n; ++i) {
        if (here[i]) Send(*requests[i].from, kDone, call_id, generation, i, false, why);
      }
      return Status::Error(why);
    }
  }
  for (int i = 1; i < n; ++i) Send(*requests[i].from, kStarted, call_id, generation, i, true, "");

  std::vector<void*> payloads(n, nullptr);
  payloads[0] = mine;
  Status result;
  for (int i = 1; i < n && result.ok(); ++i) {
    result = transport.Import(i, requests[i].body, &payloads[i]);
  }
  if (result.ok()) result = rendezvous::RunLeaderWork(work, payloads);
  for (int i = 1; i < n; ++i) {
    std::string reply;
    Status mine_ok = result.ok() ? transport.Reply(i, &reply) : result;
    if (!mine_ok.ok() && result.ok()) result = mine_ok;
    Send(*requests[i].from, kDone, call_id, generation, i, mine_ok.ok(),
         mine_ok.ok() ? reply : mine_ok.message());
  }
  return result;
}

Status Follow(int64_t call_id, int64_t generation, const std::vector<int32_t>& processes,
              int index, std::chrono::milliseconds timeout, Transport& transport,
              const Status& prior) {
  const int leader = processes[0];
  const auto deadline = Clock::now() + timeout;
  std::string request;
  const Status exported = prior.ok() ? transport.Export(&request) : prior;
  ConnectionPtr c;
  JAXMG_RETURN_IF_ERROR(Connect(leader, deadline, &c));
  const auto closed = [&] {
    DropOutgoing(c);
    return Errorf("jaxmg: process ", leader, " (the leader of call ", call_id,
                  ") closed its channel: it exited or crashed");
  };
  // A failed export still goes to the leader, so every participant fails now
  // rather than at the timeout.
  if (!Send(*c, kRequest, call_id, generation, index, exported.ok(),
            exported.ok() ? request : exported.message())) {
    return closed();
  }
  const std::pair<int64_t, int64_t> key{call_id, generation};
  bool started = false, cancelled = false;
  Clock::time_point grace;
  while (true) {
    Frame f;
    bool got = false, eof = false;
    {
      std::unique_lock<std::mutex> lock(c->box_mu);
      auto ready = [&] {
        auto it = c->box.find(key);
        return (it != c->box.end() && !it->second.empty()) || c->eof;
      };
      // Until the meeting starts the arrival deadline holds; the work itself
      // may take as long as it needs, but a leader that dies is noticed.
      if (started) {
        c->box_cv.wait(lock, ready);
      } else {
        c->box_cv.wait_until(lock, cancelled ? grace : deadline, ready);
      }
      auto it = c->box.find(key);
      if (it != c->box.end() && !it->second.empty()) {
        f = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) c->box.erase(it);
        got = true;
      }
      eof = c->eof;
    }
    if (!got) {
      if (eof) return closed();
      if (!cancelled) {
        // Withdraw the request; the leader's answer settles whether the
        // meeting failed or had just started.
        cancelled = true;
        grace = Clock::now() + std::chrono::seconds(10);
        if (Send(*c, kCancel, call_id, generation, index, true, "")) continue;
        return closed();
      }
      // The leader does not even answer the cancel. Other calls may share
      // this connection, so it stays open; this meeting's late answers are
      // dropped (the cancel, read in order, withdraws the request first).
      {
        std::lock_guard<std::mutex> lock(c->box_mu);
        c->box.erase(key);
        c->abandoned.insert(key);
      }
      return Errorf("jaxmg: participant ", index, " (process ", processes[index],
                    ") waited ", timeout.count(), " ms for call ", call_id,
                    " to start; its leader, process ", leader, ", does not answer");
    }
    if (f.h.kind == kStarted) {
      started = true;
    } else if (f.h.kind == kDone) {
      if (!f.h.ok && cancelled && !started) {
        return Errorf("jaxmg: participant ", index, " (process ", processes[index], ") waited ",
                      timeout.count(), " ms for call ", call_id, " to start; its leader, process ",
                      leader, ", or another participant never arrived. Every process of the mesh "
                      "must execute the same jaxmg calls; raise JAXMG_TIMEOUT_S if one is merely "
                      "slow. (", f.body, ")");
      }
      if (!f.h.ok) return Status::Error(f.body);
      if (!exported.ok()) return exported;
      return transport.Apply(f.body);
    }
  }
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
  if (s.listen_fd >= 0) {
    // The name is free again only once the old acceptor has left accept().
    ::shutdown(s.listen_fd, SHUT_RDWR);
    std::thread acceptor = std::move(s.acceptor);
    lock.unlock();
    if (acceptor.joinable()) acceptor.join();
    lock.lock();
    ::close(s.listen_fd);
    s.listen_fd = -1;
    for (auto& [p, c] : s.outgoing) ::shutdown(c->fd, SHUT_RDWR);
    s.outgoing.clear();
    s.calls.clear();
    s.arrivals.clear();
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errorf("jaxmg: socket() failed: ", std::strerror(errno));
  socklen_t len;
  const sockaddr_un addr = Address(name, process_index, &len);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(fd, 64) != 0) {
    const int err = errno;
    ::close(fd);
    return Errorf("jaxmg: process ", process_index, " could not open its job channel: ",
                  std::strerror(err),
                  err == EADDRINUSE ? " (another process of this job has the same rank)" : "");
  }
  s.token = token;
  s.name = name;
  s.secret = secret;
  s.process = process_index;
  s.listen_fd = fd;
  s.acceptor = std::thread(Accept, fd);
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
            const rendezvous::LeaderWork& work, const Status& prior) {
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
    return Lead(call_id, generation, processes, mine, arrival_timeout, transport, work, prior);
  }
  return Follow(call_id, generation, processes, index, arrival_timeout, transport, prior);
}

Stats GetStats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return Stats{s.incoming_open + static_cast<int64_t>(s.outgoing.size()),
               static_cast<int64_t>(s.inbox.size()), static_cast<int64_t>(s.calls.size())};
}

}  // namespace jaxmg::processes
