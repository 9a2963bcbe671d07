// SHA-256 and HMAC-SHA-256 against published known answers: the FIPS 180-4
// examples (NIST's "abc", the 448- and 896-bit messages, a million 'a') and
// RFC 4231's HMAC test cases 1-7, plus messages around the padding
// boundaries, hashed whole and fed in pieces of every small size.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/check.h"
#include "xla_ext/rendezvous/sha256.h"

namespace sha256 = jaxmg::sha256;

namespace {

std::string Hex(const sha256::Digest& d, size_t bytes = 32) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

int failures = 0;

void Expect(const std::string& what, const std::string& got, const std::string& want) {
  if (got != want) {
    std::fprintf(stderr, "%s: got %s, want %s\n", what.c_str(), got.c_str(), want.c_str());
    ++failures;
  }
}

// The digest of `message` fed `piece` bytes at a time.
sha256::Digest InPieces(const std::string& message, size_t piece) {
  sha256::Hasher h;
  for (size_t at = 0; at < message.size(); at += piece) {
    h.Update(message.data() + at, std::min(piece, message.size() - at));
  }
  return h.Finish();
}

void CheckHashes() {
  const std::vector<std::pair<std::string, std::string>> known = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlm"
       "nopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
      // One byte short of, at, and past the lengths where padding needs a
      // second block.
      {std::string(55, 'x'), "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {std::string(56, 'x'), "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {std::string(63, 'x'), "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {std::string(64, 'x'), "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {std::string(65, 'x'), "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
      {std::string(119, 'x'), "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
      {std::string(120, 'x'), "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
  };
  for (const auto& [message, want] : known) {
    const std::string what = "sha256 of " + std::to_string(message.size()) + " bytes";
    Expect(what, Hex(sha256::Hash(message)), want);
    if (message.size() > 1000) continue;
    for (size_t piece = 1; piece <= 70; ++piece) {
      Expect(what + " in pieces of " + std::to_string(piece), Hex(InPieces(message, piece)), want);
    }
  }
}

void CheckHmac() {
  struct Case {
    std::string key, data, want;
    size_t bytes = 32;  // case 5 compares a truncated output
  };
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(20, '\x0c'), "Test With Truncation", "a3b6167473100ee06e0c796c2955552b", 16},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. The "
       "key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Expect("RFC 4231 case " + std::to_string(i + 1), Hex(sha256::Hmac(c.key, c.data), c.bytes),
           c.want);
  }
}

void CheckEqual() {
  const sha256::Digest a = sha256::Hash("a"), b = sha256::Hash("b");
  CHECK(sha256::Equal(a, a));
  CHECK(!sha256::Equal(a, b));
  for (size_t i = 0; i < a.size(); ++i) {
    sha256::Digest c = a;
    c[i] ^= 1;  // one bit anywhere
    CHECK(!sha256::Equal(a, c));
  }
}

}  // namespace

int main() {
  CheckHashes();
  CheckHmac();
  CheckEqual();
  CHECK(failures == 0);
  std::printf("sha256_test: passed\n");
  return 0;
}
