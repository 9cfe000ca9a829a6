// Strict request framing (server/http_framing.h), byte by byte: what RFC 9112 allows is parsed,
// what enables request smuggling or hangs a lenient parser is refused with the right status.
#include "kvserve/server/http_framing.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "kvserve/server/api_key.h"

namespace kvserve::server {
namespace {

FramingLimits limits() {
  FramingLimits l;
  l.max_head_bytes = 1024;
  l.max_body_bytes = 1000;
  return l;
}

RequestHead head_ok(const std::string& in) {
  auto r = parse_request_head(in, limits());
  EXPECT_TRUE(std::holds_alternative<RequestHead>(r)) << in;
  return std::holds_alternative<RequestHead>(r) ? std::get<RequestHead>(r) : RequestHead{};
}

int head_status(const std::string& in) {
  auto r = parse_request_head(in, limits());
  if (const auto* e = std::get_if<FramingError>(&r)) return e->status;
  return std::holds_alternative<NeedMoreInput>(r) ? 0 : 200;
}

TEST(HttpFraming, WellFormedHeads) {
  RequestHead h = head_ok("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\nrest");
  EXPECT_EQ(h.content_length, 12u);
  EXPECT_FALSE(h.chunked);
  EXPECT_EQ(h.head_bytes,
            std::string("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n").size());
  // Content-Length, Transfer-Encoding and Expect are taken out of the rewritten head.
  EXPECT_EQ(h.rewritten, "POST /generate HTTP/1.1\r\nHost: x\r\n");
  h = head_ok(
      "\r\nGET /health HTTP/1.0\r\nHost:   x  \r\n\r\n");  // a leading empty line is allowed
  EXPECT_TRUE(h.http10);
  EXPECT_EQ(h.rewritten, "GET /health HTTP/1.0\r\nHost: x\r\n");
  h = head_ok("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_TRUE(h.chunked);
  EXPECT_TRUE(h.expect_continue);
  // Identical repeated lengths are one length (RFC 9110 8.6).
  EXPECT_EQ(head_ok("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n")
                .content_length,
            5u);
  // A path with bytes that are not ASCII reaches the router (which answers 404).
  EXPECT_EQ(head_status("GET /\xff HTTP/1.1\r\n\r\n"), 200);
}

TEST(HttpFraming, IncompleteHeadsWaitButAWrongRequestLineDoesNot) {
  EXPECT_EQ(head_status("POST /generate HTTP/1.1\r\nHost: x\r\n"), 0);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nX: " + std::string(900, 'a')), 0);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nX: " + std::string(1100, 'a')), 431);
  EXPECT_EQ(head_status("GET /  HTTP/1.1\r\nHost: x\r\n"), 400);
  EXPECT_EQ(head_status("\x16\x03\x01\x02\x01\r\n"), 400);  // TLS sent to a plain port
}

TEST(HttpFraming, SmugglingAndMalformedFramingAreRefused) {
  // Conflicting lengths, in one header or two.
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: \r\n\r\n"), 400);
  // Transfer codings other than chunked alone, and both framings at once.
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"), 400);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n"), 400);
  EXPECT_EQ(
      head_status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
      400);
  EXPECT_EQ(head_status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  // Header syntax: space before the colon, folding, bare LF, control bytes, empty names.
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nX: a\nY: b\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nX: a\x01\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\n: a\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/2.0\r\n\r\n"), 400);
  EXPECT_EQ(head_status("GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n"), 417);
  // Sizes: a declared body over the limit is refused before it is read.
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n"), 413);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 52428800\r\n\r\n"), 413);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(head_status("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n"), 200);
}

// A chunk encoder written for the test (random chunk sizes, extensions and trailers), fed to the
// decoder in random pieces: the decoded body is the original.
TEST(HttpFraming, ChunkedRoundTripsInAnyPieces) {
  uint64_t seed = 20261202;
  if (const char* s = std::getenv("KVSERVE_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    std::string body(rng() % 1000, '\0');
    for (char& c : body)
      c = static_cast<char>(rng());
    std::string wire;
    for (size_t pos = 0; pos < body.size();) {
      const size_t n = std::min<size_t>(body.size() - pos, 1 + rng() % 300);
      char size[32];
      std::snprintf(size, sizeof size, rng() % 2 ? "%zx" : "%zX", n);
      wire += size;
      if (rng() % 4 == 0) wire += ";name=value";
      wire += "\r\n" + body.substr(pos, n) + "\r\n";
      pos += n;
    }
    wire += "0\r\n";
    if (rng() % 3 == 0) wire += "X-Trailer: 1\r\n";
    wire += "\r\n";
    const std::string next = "GET /next HTTP/1.1\r\n\r\n";
    wire += next;
    ChunkedDecoder d(limits());
    std::string out;
    std::string pending;
    size_t fed = 0;
    while (!d.done() && !d.error() && fed < wire.size()) {
      const size_t n = std::min<size_t>(wire.size() - fed, 1 + rng() % 64);
      pending += wire.substr(fed, n);
      fed += n;
      pending.erase(0, d.feed(pending, out));
    }
    ASSERT_EQ(d.error(), nullptr) << d.error()->message;
    ASSERT_TRUE(d.done());
    EXPECT_EQ(out, body) << "trial " << trial;
    EXPECT_EQ(pending + wire.substr(fed), next);  // the next request is left untouched
  }
}

int chunked_status(const std::string& wire) {
  ChunkedDecoder d(limits());
  std::string out;
  d.feed(wire, out);
  if (d.error()) return d.error()->status;
  return d.done() ? 200 : 0;
}

TEST(HttpFraming, MalformedChunksAreRefusedAtOnce) {
  EXPECT_EQ(chunked_status("-1\r\n"), 400);  // a lenient strtoul reads this as 2^64 - 1
  EXPECT_EQ(chunked_status("-"), 400);       // no need to wait for the line's end
  EXPECT_EQ(chunked_status(" 5\r\nhello\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(chunked_status("5 5\r\nhello\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(chunked_status("0x5\r\nhello\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(chunked_status("5\r\nhelloXY0\r\n\r\n"), 400);  // no CRLF after the data
  EXPECT_EQ(chunked_status("5\nhello\r\n0\r\n\r\n"), 400);  // bare LF ending the size line
  EXPECT_EQ(chunked_status("fffffffffffffffff\r\n"), 413);
  EXPECT_EQ(chunked_status("3e9\r\n"), 413);  // 1001 bytes declared, the limit is 1000
  EXPECT_EQ(chunked_status("5\r\nhello\r\n0\r\nbad trailer\r\n\r\n"), 400);
  EXPECT_EQ(chunked_status("5\r\nhello\r\n0\r\n\r\n"), 200);
  EXPECT_EQ(chunked_status("5\r\nhel"), 0);  // waits for the rest
}

TEST(ApiKey, MatchesOnlyTheExactBearerKey) {
  EXPECT_TRUE(api_key_matches("Bearer sk-abc", "sk-abc"));
  EXPECT_FALSE(api_key_matches("Bearer sk-ab", "sk-abc"));
  EXPECT_FALSE(api_key_matches("Bearer sk-abcd", "sk-abc"));
  EXPECT_FALSE(api_key_matches("Bearer sk-abd", "sk-abc"));
  EXPECT_FALSE(api_key_matches("bearer sk-abc", "sk-abc"));
  EXPECT_FALSE(api_key_matches("sk-abc", "sk-abc"));
  EXPECT_FALSE(api_key_matches("", "sk-abc"));
  EXPECT_FALSE(api_key_matches("Bearer ", "sk-abc"));
  // The key cycled to the length of what was sent still differs.
  EXPECT_FALSE(api_key_matches("Bearer sk-abcsk-abc", "sk-abc"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("a", ""));
}

}  // namespace
}  // namespace kvserve::server
