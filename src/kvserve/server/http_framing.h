// Strict HTTP/1.1 request framing (RFC 9112), checked before httplib sees a request: the request
// head (request line and headers) is bounded in size, Content-Length and Transfer-Encoding are
// validated (smuggling-prone combinations refused), chunked bodies are decoded strictly. What
// passes is rewritten as one well-formed request with a Content-Length, so httplib's lenient
// parser only ever reads well-framed input. Pure functions over bytes (no sockets), so tests can
// feed them anything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

namespace kvserve::server {

struct FramingError {
  int status = 400;  // 400 malformed, 413 body too large, 417 expectation, 431 head too large
  std::string message;
};

struct FramingLimits {
  size_t max_head_bytes = size_t{16} << 10;  // request line + headers + the blank line
  size_t max_body_bytes = size_t{32} << 20;
};

// A complete, valid request head.
struct RequestHead {
  size_t head_bytes = 0;         // bytes of the input it used (through the blank line)
  std::string rewritten;         // request line + headers minus Content-Length, Transfer-Encoding
                                 // and Expect (no blank line: the caller adds Content-Length)
  bool chunked = false;          // the body is chunked (else content_length bytes follow)
  size_t content_length = 0;     // declared length when not chunked (0: no body)
  bool expect_continue = false;  // "Expect: 100-continue": answer 100 before reading the body
  bool http10 = false;
};

struct NeedMoreInput {};

// Parses the head at the start of `in` (leading empty lines skipped, as RFC 9112 allows).
// NeedMoreInput while the blank line has not arrived and the limit is not passed.
std::variant<NeedMoreInput, RequestHead, FramingError> parse_request_head(
    std::string_view in, const FramingLimits& limits);

// Incremental strict decoder of a chunked body: hex sizes only (no sign, no spaces inside, at
// most 15 digits), optional extensions, CRLF after every chunk, optional trailers (discarded).
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(const FramingLimits& limits) : limits_(limits) {}

  // Consumes a prefix of `in`, appending decoded data to `body`; returns the bytes consumed.
  // Check error() and done() after each call; the rest of `in` (after done()) is the next
  // request's.
  size_t feed(std::string_view in, std::string& body);
  bool done() const { return state_ == State::kDone; }
  const FramingError* error() const { return failed_ ? &error_ : nullptr; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  size_t fail(int status, std::string message);

  FramingLimits limits_;
  State state_ = State::kSize;
  size_t remaining_ = 0;  // of the current chunk's data
  size_t trailer_bytes_ = 0;
  bool failed_ = false;
  FramingError error_;
};

}  // namespace kvserve::server
