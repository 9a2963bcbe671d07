// Hostile local processes against the job channel. Before authentication:
// garbage, a header announcing 2^40 bytes, a hello then a flood of bytes, a
// hello trickled past the deadline, floods of 500 half-open connections (the
// leader's threads, fds and memory stay bounded while the job's meetings
// stay right), a client and a squatter of another user (root only: a child
// setuid()s to nobody), a squatter of this user without the secret. After
// it (a peer that holds the secret but breaks the protocol): oversized
// frames, requests nobody asked for, too many arrivals, a request over the
// leader's cap, and a leader answering with oversized or malformed frames.
// The job either runs with right results or fails at once naming the cause;
// no process crashes.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "tests/processes_testing.h"
#include "xla_ext/rendezvous/channel_wire.h"

using namespace testing;
namespace wire = jaxmg::processes::wire;

namespace {

constexpr uid_t kNobody = 65534;

std::string JobName(const std::string& token) { return token.substr(0, token.find(':')); }
std::string JobSecret(const std::string& token) { return token.substr(token.find(':') + 1); }

sockaddr_un Address(const std::string& job, int rank, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "jaxmg-" + job + "-" + std::to_string(rank);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

// A blocking connection to rank `rank`'s channel, reads timing out after 5 s.
int Dial(const std::string& job, int rank, Clock::time_point until = Clock::now() + 5s) {
  socklen_t len;
  const sockaddr_un addr = Address(job, rank, &len);
  while (true) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      const timeval five{5, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof(five));
      return fd;
    }
    close(fd);
    if (Clock::now() > until) return -1;
    std::this_thread::sleep_for(5ms);
  }
}

int Listen(const std::string& job, int rank) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  socklen_t len;
  const sockaddr_un addr = Address(job, rank, &len);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t k = send(fd, p, size, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    size -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t k = recv(fd, p, size, 0);
    if (k <= 0) return false;
    p += k;
    size -= static_cast<size_t>(k);
  }
  return true;
}

// Reads until the peer closes; the bytes it sent before, or -1 if it kept
// the connection open past `within`.
int64_t BytesUntilClosed(int fd, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  int64_t total = 0;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return -1;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return total;
    if (k > 0) total += k;
  }
}

wire::Nonce SomeNonce(uint32_t seed) {
  wire::Nonce n;
  std::mt19937 gen(seed);
  for (auto& b : n) b = static_cast<uint8_t>(gen());
  return n;
}

// The follower's half of the handshake, done by hand.
bool HandshakeAsFollower(int fd, const std::string& token, int me, int leader) {
  wire::Hello hello{wire::kMagic, wire::kVersion, me, leader, SomeNonce(me)};
  wire::Challenge c;
  if (!WriteAll(fd, &hello, sizeof(hello)) || !ReadAll(fd, &c, sizeof(c))) return false;
  const auto want = wire::Proof(JobSecret(token), wire::Role::kLeader, JobName(token), leader, me,
                                hello.nonce, c.nonce);
  if (!jaxmg::sha256::Equal(want, c.proof)) return false;
  wire::Answer a{wire::kMagic, wire::kVersion,
                 wire::Proof(JobSecret(token), wire::Role::kFollower, JobName(token), leader, me,
                             hello.nonce, c.nonce)};
  wire::Welcome w;
  return WriteAll(fd, &a, sizeof(a)) && ReadAll(fd, &w, sizeof(w)) && w.magic == wire::kMagic;
}

// The leader's half, done by hand on an accepted connection.
bool HandshakeAsLeader(int fd, const std::string& token, int me) {
  wire::Hello hello;
  if (!ReadAll(fd, &hello, sizeof(hello))) return false;
  const wire::Nonce mine = SomeNonce(99);
  wire::Challenge c{wire::kMagic, wire::kVersion, me, hello.follower, mine,
                    wire::Proof(JobSecret(token), wire::Role::kLeader, JobName(token), me,
                                hello.follower, hello.nonce, mine)};
  wire::Answer a;
  if (!WriteAll(fd, &c, sizeof(c)) || !ReadAll(fd, &a, sizeof(a))) return false;
  const wire::Welcome w{wire::kMagic, wire::kVersion};
  return WriteAll(fd, &w, sizeof(w));
}

bool SendFrame(int fd, uint32_t kind, int64_t call, int64_t generation, int32_t index, bool ok,
               uint64_t size, const std::string& body = "") {
  const wire::Header h{wire::kMagic, kind, call, generation, index, ok ? 1 : 0, size};
  return WriteAll(fd, &h, sizeof(h)) && WriteAll(fd, body.data(), body.size());
}

std::string ArrivalBody(uint64_t request_bytes, const std::string& signature,
                        const std::string& request) {
  const wire::Arrival a{request_bytes, static_cast<uint32_t>(signature.size()), 0};
  return std::string(reinterpret_cast<const char*>(&a), sizeof(a)) + signature + request;
}

// Drops this child's privileges to nobody's; false if it may not (not root,
// or a sandbox without that uid).
bool BecomeNobody() {
  return geteuid() == 0 && setgroups(0, nullptr) == 0 && setgid(kNobody) == 0 &&
         setuid(kNobody) == 0;
}

bool Root(const char* scenario) {
  if (geteuid() == 0) return true;
  std::printf("%s: skipped: needs root, to fork a process of another user (nobody)\n", scenario);
  return false;
}

// Samples this process's threads, fds and resident memory until stopped.
class Sampler {
 public:
  Sampler() : thread_([this] {
      while (!stop_.load()) {
        threads_ = std::max<int64_t>(threads_, StatusField("Threads"));
        fds_ = std::max<int64_t>(fds_, OpenFds());
        rss_kb_ = std::max<int64_t>(rss_kb_, StatusField("VmRSS"));
        std::this_thread::sleep_for(2ms);
      }
    }) {}
  ~Sampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int64_t threads() const { return threads_; }
  int64_t fds() const { return fds_; }
  int64_t rss_kb() const { return rss_kb_; }

 private:
  std::atomic<bool> stop_{false};
  int64_t threads_ = 0, fds_ = 0, rss_kb_ = 0;
  std::thread thread_;
};

struct Attack {
  std::atomic<int> done{0};
  std::atomic<int> failures{0};
  std::atomic<int> counted{0};  // the leader has counted its connections
};

// 1. Garbage before authentication, while a leader and a follower meet 300
// times: each hostile connection is closed within 3 s, having got nothing
// (or, after a well-formed hello, only the leader's 80-byte challenge); the
// meetings' sums stay right and the leader keeps only the follower's
// connection.
void CheckGarbageBeforeAuthentication() {
  const std::string token = NewToken("garbage") + ":s3cret";
  const std::string job = JobName(token);
  auto* attack = Shared<Attack>();
  auto expect = [attack](const char* what, int fd, int64_t want_bytes) {
    const int64_t got = BytesUntilClosed(fd, 3000ms);
    close(fd);
    std::fprintf(stderr, "garbage: %s: %s after %lld bytes from the leader\n", what,
                 got < 0 ? "still open" : "closed", static_cast<long long>(std::max<int64_t>(got, 0)));
    if (got != want_bytes) attack->failures += 1;
  };
  RunChildren("garbage before authentication", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        for (int it = 0; it < 300; ++it) {
          CHECK_OK(MeetOnce(kCallA, 2, 0, 1, it, 10s));
          if (it % 10 == 0) std::this_thread::sleep_for(10ms);  // the attack runs meanwhile
        }
        while (attack->done.load() == 0) std::this_thread::sleep_for(10ms);
        CHECK(processes::GetStats().connections == 1);
        CHECK(processes::GetStats().pending == 0);
        attack->counted = 1;
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        for (int it = 0; it < 300; ++it) CHECK_OK(MeetOnce(kCallA, 2, 1, 1, it, 10s));
        while (attack->counted.load() == 0) std::this_thread::sleep_for(10ms);
      },
      [=] {
        // The header of a frame announcing 2^40 bytes (it crashed the old
        // channel at once).
        int fd = Dial(job, 0);
        CHECK(fd >= 0);
        const wire::Header big{wire::kMagic, 1, 0, 0, 1, 1, uint64_t{1} << 40};
        CHECK(WriteAll(fd, &big, sizeof(big)));
        expect("a 2^40-byte header", fd, 0);
        // Random bytes.
        fd = Dial(job, 0);
        std::string noise(4096, '\0');
        std::mt19937 gen(7);
        for (char& ch : noise) ch = static_cast<char>(gen());
        WriteAll(fd, noise.data(), noise.size());
        expect("4 KiB of noise", fd, 0);
        // A well-formed hello, then 1 MiB of garbage instead of the answer.
        fd = Dial(job, 0);
        const wire::Hello hello{wire::kMagic, wire::kVersion, 1, 0, SomeNonce(3)};
        CHECK(WriteAll(fd, &hello, sizeof(hello)));
        WriteAll(fd, std::string(1 << 20, 'x').data(), 1 << 20);
        expect("a hello and 1 MiB of garbage", fd, sizeof(wire::Challenge));
        // Hellos of another version, and to another leader.
        fd = Dial(job, 0);
        wire::Hello old = hello;
        old.version = 1;
        CHECK(WriteAll(fd, &old, sizeof(old)));
        expect("a hello of version 1", fd, 0);
        fd = Dial(job, 0);
        wire::Hello elsewhere = hello;
        elsewhere.leader = 5;
        CHECK(WriteAll(fd, &elsewhere, sizeof(elsewhere)));
        expect("a hello to rank 5", fd, 0);
        // A hello trickled a byte every 100 ms: past the 2 s deadline.
        fd = Dial(job, 0);
        const auto start = Clock::now();
        const char* bytes = reinterpret_cast<const char*>(&hello);
        for (size_t i = 0; i < sizeof(hello) && send(fd, bytes + i, 1, MSG_NOSIGNAL) == 1; ++i) {
          std::this_thread::sleep_for(100ms);
        }
        const double closed_after = Seconds(start);
        expect("a hello trickled", fd, 0);
        std::fprintf(stderr, "garbage: the trickle was cut after %.2f s\n", closed_after);
        if (closed_after > 3.0) attack->failures += 1;
        attack->done = 1;
        CHECK(attack->failures.load() == 0);
      },
  }, 60s);
}

// 2. Floods of 500 half-open connections (opened, held 200 ms, closed, for
// 3 s) while three processes meet 300 times, the followers connecting during
// the flood: the sums stay right, and the leader's threads, fds and memory
// stay within a few of their values before the flood.
void CheckFlood() {
  const std::string token = NewToken("flood") + ":s3cret";
  const std::string job = JobName(token);
  auto* flooding = Shared<std::atomic<int>>();
  auto* shed = Shared<std::atomic<int64_t>>();
  auto follower = [=](int rank) {
    return std::function<void()>([=] {
      while (flooding->load() == 0) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(200ms);
      CHECK_OK(processes::Open(token, rank));
      RegisterAll(3, {kCallA});
      for (int it = 0; it < 300; ++it) CHECK_OK(MeetOnce(kCallA, 3, rank, 1, it, 20s));
      while (flooding->load() != 3) std::this_thread::sleep_for(5ms);  // the leader counted
    });
  };
  RunChildren("flood of half-open connections", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(3, {kCallA});
        Sampler sampler;
        std::this_thread::sleep_for(50ms);
        const int64_t threads = StatusField("Threads"), fds = OpenFds();
        const int64_t rss = StatusField("VmRSS");
        flooding->store(1);
        for (int it = 0; it < 300; ++it) CHECK_OK(MeetOnce(kCallA, 3, 0, 1, it, 20s));
        while (flooding->load() == 1) std::this_thread::sleep_for(10ms);
        sampler.Stop();
        std::fprintf(stderr, "flood: leader threads %lld -> max %lld, fds %lld -> max %lld, rss "
                     "%lld kB -> max %lld kB; %lld hostile connections shed\n",
                     static_cast<long long>(threads), static_cast<long long>(sampler.threads()),
                     static_cast<long long>(fds), static_cast<long long>(sampler.fds()),
                     static_cast<long long>(rss), static_cast<long long>(sampler.rss_kb()),
                     static_cast<long long>(shed->load()));
        CHECK(sampler.threads() <= threads + 2);  // the followers' two readers
        CHECK(sampler.fds() <= fds + wire::kMaxUnauthenticated + 2 + 2);
        CHECK(sampler.rss_kb() - rss < 16 * 1024);
        CHECK(processes::GetStats().connections == 2);
        CHECK(processes::GetStats().pending == 0);
        flooding->store(3);
      },
      follower(1),
      follower(2),
      [=] {
        while (flooding->load() == 0) std::this_thread::sleep_for(1ms);
        socklen_t len;
        const sockaddr_un addr = Address(job, 0, &len);
        const auto until = Clock::now() + 3s;
        while (Clock::now() < until) {
          std::vector<int> fds;
          for (int i = 0; i < 500; ++i) {
            const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            CHECK(fd >= 0);
            if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
              fds.push_back(fd);
            } else {
              close(fd);  // backlog full for a moment
            }
          }
          std::this_thread::sleep_for(200ms);
          for (int fd : fds) {
            char byte;
            if (recv(fd, &byte, 1, MSG_DONTWAIT) == 0) *shed += 1;  // the leader closed it
            close(fd);
          }
        }
        flooding->store(2);
      },
  }, 60s);
}

// 3. A peer that holds the secret but breaks the protocol, as "process 2":
// each bad frame ends its connection (and the leader lives); an arrival
// announcing a 2^40-byte request fails that meeting for every participant
// before the bytes move; too many arrivals end the connection. Afterwards the
// real pair meets normally.
void CheckHostileAfterAuthentication() {
  const std::string token = NewToken("hostilepeer") + ":s3cret";
  const std::string job = JobName(token);
  auto* ready = Shared<std::atomic<int>>();
  RunChildren("hostile peer after authentication", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        RegisterAll(3, {kCallB});
        const int64_t rss = StatusField("VmRSS");
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 0, 10s));
        while (ready->load() < 1) std::this_thread::sleep_for(5ms);
        const Status s = MeetOnce(kCallB, 3, 0, 2, 0, 10s);
        std::fprintf(stderr, "hostile peer: leader: %s\n", s.message().c_str());
        CHECK(Contains(s, "participant 2 (process 2) announced a request of 1099511627776 bytes "
                          "for call 12, more than the 40 it can need"));
        while (ready->load() < 2) std::this_thread::sleep_for(5ms);
        CHECK_OK(MeetOnce(kCallA, 2, 0, 1, 1, 10s));
        CHECK(StatusField("VmRSS") - rss < 16 * 1024);
        CHECK(processes::GetStats().pending == 0);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        RegisterAll(3, {kCallB});
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 0, 10s));
        while (ready->load() < 1) std::this_thread::sleep_for(5ms);
        const Status s = MeetOnce(kCallB, 3, 1, 2, 0, 10s);
        CHECK(Contains(s, "announced a request of 1099511627776 bytes"));
        CHECK_OK(MeetOnce(kCallA, 2, 1, 1, 1, 10s));
      },
      [=] {
        auto closes = [&](const char* what, auto&& send) {
          const int fd = Dial(job, 0);
          CHECK(fd >= 0);
          CHECK(HandshakeAsFollower(fd, token, 2, 0));
          send(fd);
          const int64_t got = BytesUntilClosed(fd, 3000ms);
          std::fprintf(stderr, "hostile peer: %s: %s\n", what, got == 0 ? "closed" : "NOT closed");
          CHECK(got == 0);
          close(fd);
        };
        closes("a 2^40-byte arrival", [](int fd) {
          SendFrame(fd, wire::kArrive, kCallB, 0, 2, true, uint64_t{1} << 40);
        });
        closes("an arrival whose signature overruns it", [](int fd) {
          std::string body = ArrivalBody(8, "", "12345678");
          reinterpret_cast<wire::Arrival*>(body.data())->signature_bytes = 1u << 31;
          SendFrame(fd, wire::kArrive, kCallB, 0, 2, true, body.size(), body);
        });
        closes("a request nobody asked for", [](int fd) {
          SendFrame(fd, wire::kRequest, kCallB, 7, 2, true, 100, std::string(100, 'r'));
        });
        closes("a frame of unknown kind", [](int fd) { SendFrame(fd, 99, 0, 0, 2, true, 0); });
        closes("300 arrivals waiting at once", [](int fd) {
          for (int g = 1; g <= 300; ++g) {
            const std::string body = ArrivalBody(40, "", std::string(40, 'v'));
            if (!SendFrame(fd, wire::kArrive, kCallA + 1000, g, 2, true, body.size(), body)) break;
          }
        });
        // A well-formed arrival announcing 2^40 bytes, to come after the start.
        const int fd = Dial(job, 0);
        CHECK(HandshakeAsFollower(fd, token, 2, 0));
        const std::string body = ArrivalBody(uint64_t{1} << 40, "", "");
        CHECK(SendFrame(fd, wire::kArrive, kCallB, 0, 2, true, body.size(), body));
        ready->store(1);
        wire::Header h;
        CHECK(ReadAll(fd, &h, sizeof(h)));
        CHECK(h.kind == wire::kDone && !h.ok && h.size < wire::kMaxMessage);
        std::string why(h.size, '\0');
        CHECK(ReadAll(fd, why.data(), why.size()));
        CHECK(why.find("more than the 40 it can need") != std::string::npos);
        close(fd);
        ready->store(2);
      },
  }, 60s);
}

// 4. A leader that holds the secret but answers with a kStarted carrying a
// body, a reply one byte over what the follower's transport takes, and a
// reply announcing 2^40 bytes: each fails the follower's call at once naming
// the broken frame (its reader ends the connection) and costs it no memory;
// a later call connects again.
void CheckHostileLeader() {
  const std::string token = NewToken("hostileleader") + ":s3cret";
  const std::string job = JobName(token);
  RunChildren("hostile leader after authentication", {
      [=] {
        const int listener = Listen(job, 0);
        CHECK(listener >= 0);
        for (uint64_t reply : {uint64_t{0}, uint64_t{kValues * 8 + 1}, uint64_t{1} << 40}) {
          const int fd = accept(listener, nullptr, nullptr);
          CHECK(fd >= 0);
          CHECK(HandshakeAsLeader(fd, token, 0));
          wire::Header h;
          CHECK(ReadAll(fd, &h, sizeof(h)) && h.kind == wire::kArrive);
          std::string body(h.size, '\0');
          CHECK(ReadAll(fd, body.data(), body.size()));
          if (reply == 0) {
            SendFrame(fd, wire::kStarted, h.call_id, h.generation, h.index, true, 5, "abcde");
          } else {
            SendFrame(fd, wire::kStarted, h.call_id, h.generation, h.index, true, 0);
            SendFrame(fd, wire::kDone, h.call_id, h.generation, h.index, true, reply);
          }
          CHECK(BytesUntilClosed(fd, 3000ms) == 0);  // the follower hangs up
          close(fd);
        }
        close(listener);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        const int64_t rss = StatusField("VmRSS");
        for (int it = 0; it < 3; ++it) {
          const auto start = Clock::now();
          const Status s = MeetOnce(kCallA, 2, 1, 1, it, 10s);
          std::fprintf(stderr, "hostile leader: follower, run %d, after %.3f s: %s\n", it,
                       Seconds(start), s.message().c_str());
          CHECK(Contains(s, "process 0 (the leader of call 11) broke the channel's protocol (a "
                            "frame of "));
          CHECK(Contains(s, "this process closed the connection"));
          CHECK(Contains(s, it == 0 ? "5 bytes where at most 0 fit"
                            : it == 1 ? "41 bytes where at most 40 fit"
                                      : "1099511627776 bytes where at most 40 fit"));
          CHECK(Seconds(start) < 2.0);
        }
        CHECK(StatusField("VmRSS") - rss < 16 * 1024);
      },
  }, 30s);
}

// 5. A process of this user without the secret squats on the leader's name:
// answering each hello with a forged challenge, or not at all. The follower
// refuses the first at once and gives up on the second at its deadline, both
// naming the squatter's pid; the squatter gets one 48-byte hello from each
// and nothing more (no secret, no data).
void CheckImpostorLeader() {
  const std::string token = NewToken("impostor") + ":s3cret";
  const std::string job = JobName(token);
  struct Seen {
    std::atomic<pid_t> pid{0};
    std::atomic<int64_t> bytes{0};
    std::atomic<int> done{0};
  };
  auto* seen = Shared<Seen>();
  RunChildren("impostor on the leader's name", {
      [=] {
        const int listener = Listen(job, 0);
        CHECK(listener >= 0);
        seen->pid = getpid();
        for (bool answer : {true, false}) {
          const int fd = accept(listener, nullptr, nullptr);
          CHECK(fd >= 0);
          if (answer) {
            wire::Hello hello;
            CHECK(ReadAll(fd, &hello, sizeof(hello)));
            seen->bytes += sizeof(hello);
            const wire::Challenge forged{wire::kMagic, wire::kVersion, 0, hello.follower,
                                         SomeNonce(5), jaxmg::sha256::Hash("forged")};
            CHECK(WriteAll(fd, &forged, sizeof(forged)));
          }
          const int64_t more = BytesUntilClosed(fd, 5000ms);
          CHECK(more >= 0);
          seen->bytes += more;
          close(fd);
        }
        while (seen->done.load() == 0) std::this_thread::sleep_for(5ms);
      },
      [=] {
        while (seen->pid.load() == 0) std::this_thread::sleep_for(1ms);
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        const std::string pid = "process " + std::to_string(seen->pid.load());
        auto start = Clock::now();
        Status s = MeetOnce(kCallA, 2, 1, 1, 0, 10s);
        std::fprintf(stderr, "impostor: follower after %.3f s: %s\n", Seconds(start),
                     s.message().c_str());
        CHECK(Contains(s, "it is " + pid + " of this user, and it could not prove that it holds "
                          "this job's secret"));
        CHECK(Seconds(start) < 1.0);
        start = Clock::now();
        s = MeetOnce(kCallA, 2, 1, 1, 1, 1500ms);
        std::fprintf(stderr, "impostor: follower after %.3f s: %s\n", Seconds(start),
                     s.message().c_str());
        CHECK(Contains(s, "(" + pid + ", which holds its name, did not finish the handshake)"));
        CHECK(Seconds(start) < 3.0);
        seen->done = 1;
        std::this_thread::sleep_for(100ms);
        CHECK(seen->bytes.load() == static_cast<int64_t>(sizeof(wire::Hello)) * 2);
      },
  }, 30s);
}

// 6. A process of another user (nobody) binds the leader's name before the
// leader: the follower refuses it at once, naming its pid and user, without
// sending a byte; the leader's Open fails at once naming it too (not as a
// rank of its own job). The squatter receives nothing.
void CheckSquatterOfAnotherUser() {
  if (!Root("squatter of another user")) return;
  const std::string token = NewToken("squatter") + ":s3cret";
  const std::string job = JobName(token);
  struct Seen {
    std::atomic<pid_t> pid{0};
    std::atomic<int> refused{0};  // the squatter could not become nobody
    std::atomic<int64_t> connections{0}, bytes{0};
    std::atomic<int> done{0};
  };
  auto* seen = Shared<Seen>();
  RunChildren("squatter of another user", {
      [=] {
        if (!BecomeNobody()) {
          seen->refused = 1;
          return;
        }
        const int listener = Listen(job, 0);
        CHECK(listener >= 0);
        seen->pid = getpid();
        fcntl(listener, F_SETFL, O_NONBLOCK);
        while (seen->done.load() == 0) {
          const int fd = accept(listener, nullptr, nullptr);
          if (fd < 0) {
            std::this_thread::sleep_for(2ms);
            continue;
          }
          seen->connections += 1;
          const int64_t got = BytesUntilClosed(fd, 3000ms);
          seen->bytes += std::max<int64_t>(got, 0);
          close(fd);
        }
      },
      [=] {
        while (seen->pid.load() == 0 && !seen->refused.load()) std::this_thread::sleep_for(1ms);
        if (seen->refused.load()) return;
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        const auto start = Clock::now();
        const Status s = MeetOnce(kCallA, 2, 1, 1, 0, 10s);
        std::fprintf(stderr, "squatter: follower after %.3f s: %s\n", Seconds(start),
                     s.message().c_str());
        CHECK(Contains(s, "it is process " + std::to_string(seen->pid.load()) +
                              " of user nobody (uid 65534), while this job runs as"));
        CHECK(Contains(s, "Nothing was sent to it"));
        CHECK(Seconds(start) < 1.0);
      },
      [=] {
        while (seen->pid.load() == 0 && !seen->refused.load()) std::this_thread::sleep_for(1ms);
        if (seen->refused.load()) return;
        const auto start = Clock::now();
        const Status s = processes::Open(token, 0);
        std::fprintf(stderr, "squatter: leader after %.3f s: %s\n", Seconds(start),
                     s.message().c_str());
        CHECK(Contains(s, "is held by process " + std::to_string(seen->pid.load()) +
                              " of user nobody (uid 65534), another user than this job's"));
        CHECK(!Contains(s, "same rank"));
        CHECK(Seconds(start) < 1.0);
        std::this_thread::sleep_for(1500ms);  // the follower has tried too
        seen->done = 1;
        std::this_thread::sleep_for(100ms);
        std::fprintf(stderr, "squatter: it saw %lld connections and %lld bytes\n",
                     static_cast<long long>(seen->connections.load()),
                     static_cast<long long>(seen->bytes.load()));
        CHECK(seen->connections.load() >= 1);
        CHECK(seen->bytes.load() == 0);
      },
  }, 30s);
  if (seen->refused.load()) {
    std::printf("squatter of another user: skipped: setuid(nobody) is not allowed here\n");
  }
}

// 7. A process of another user connecting to a running leader is closed
// before a byte reaches it, while the job meets normally.
void CheckClientOfAnotherUser() {
  if (!Root("client of another user")) return;
  const std::string token = NewToken("otheruser") + ":s3cret";
  const std::string job = JobName(token);
  auto* state = Shared<std::atomic<int>>();  // 1: leader up, 2: client done, -1: no setuid
  auto* counted = Shared<std::atomic<int>>();
  RunChildren("client of another user", {
      [=] {
        CHECK_OK(processes::Open(token, 0));
        RegisterAll(2, {kCallA});
        state->store(1);
        for (int it = 0; it < 50; ++it) CHECK_OK(MeetOnce(kCallA, 2, 0, 1, it, 10s));
        while (state->load() == 1) std::this_thread::sleep_for(5ms);
        CHECK(processes::GetStats().connections == 1);
        counted->store(1);
      },
      [=] {
        CHECK_OK(processes::Open(token, 1));
        RegisterAll(2, {kCallA});
        for (int it = 0; it < 50; ++it) CHECK_OK(MeetOnce(kCallA, 2, 1, 1, it, 10s));
        while (counted->load() == 0) std::this_thread::sleep_for(5ms);  // connected meanwhile
      },
      [=] {
        while (state->load() == 0) std::this_thread::sleep_for(1ms);
        if (!BecomeNobody()) {
          state->store(-1);
          return;
        }
        const int fd = Dial(job, 0);
        CHECK(fd >= 0);
        const wire::Hello hello{wire::kMagic, wire::kVersion, 1, 0, SomeNonce(1)};
        WriteAll(fd, &hello, sizeof(hello));
        const int64_t got = BytesUntilClosed(fd, 3000ms);
        std::fprintf(stderr, "other user: the leader closed its connection after %lld bytes\n",
                     static_cast<long long>(got));
        CHECK(got == 0);
        close(fd);
        state->store(2);
      },
  }, 30s);
  if (state->load() == -1) {
    std::printf("client of another user: skipped: setuid(nobody) is not allowed here\n");
  }
}

}  // namespace

int main() {
  CheckGarbageBeforeAuthentication();
  CheckFlood();
  CheckHostileAfterAuthentication();
  CheckHostileLeader();
  CheckImpostorLeader();
  CheckSquatterOfAnotherUser();
  CheckClientOfAnotherUser();
  std::printf("channel_hostile_test: passed\n");
  return 0;
}
