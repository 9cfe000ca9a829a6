#include "kvserve/server/http_framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace kvserve::server {
namespace {

constexpr size_t kMaxChunkSizeLine = 4096;
constexpr size_t kMaxDecimalDigits = 18;  // fits in int64
constexpr size_t kMaxHexDigits = 15;

bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool is_ctl(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits a comma-separated header value into trimmed elements (empty ones kept, to be refused).
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    out.push_back(
        trim_ows(v.substr(start, comma == std::string_view::npos ? v.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

FramingError error(int status, std::string message) {
  return {status, std::move(message)};
}

bool valid_request_line(std::string_view line, bool& http10) {
  const size_t sp1 = line.find(' ');
  if (sp1 == 0 || sp1 == std::string_view::npos) return false;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return false;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  for (const char c : method) {
    if (!is_tchar(static_cast<unsigned char>(c))) return false;
  }
  for (const char c : target) {
    if (is_ctl(static_cast<unsigned char>(c)) || c == ' ') return false;
  }
  if (version == "HTTP/1.1") {
    http10 = false;
  } else if (version == "HTTP/1.0") {
    http10 = true;
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::variant<NeedMoreInput, RequestHead, FramingError> parse_request_head(
    std::string_view in, const FramingLimits& limits) {
  size_t start = 0;
  while (in.substr(start, 2) == "\r\n")
    start += 2;
  const size_t end = in.find("\r\n\r\n", start);
  if (end == std::string_view::npos) {
    if (in.size() > limits.max_head_bytes) {
      return error(431,
                   fmt::format("the request head is larger than {} bytes", limits.max_head_bytes));
    }
    // A request line that is already wrong need not wait for the rest.
    const size_t first_eol = in.find("\r\n", start);
    if (first_eol != std::string_view::npos) {
      bool http10 = false;
      if (!valid_request_line(in.substr(start, first_eol - start), http10)) {
        return error(400, "malformed request line");
      }
    }
    return NeedMoreInput{};
  }
  RequestHead head;
  head.head_bytes = end + 4;
  if (head.head_bytes > limits.max_head_bytes) {
    return error(431,
                 fmt::format("the request head is larger than {} bytes", limits.max_head_bytes));
  }
  const std::string_view text = in.substr(start, end - start);
  // Lines end with CRLF; a bare CR or LF anywhere is refused (a smuggling vector).
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t eol = text.find("\r\n", pos);
    const std::string_view line =
        text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos) {
      return error(400, "a bare CR or LF in the request head");
    }
    lines.push_back(line);
    if (eol == std::string_view::npos) break;
    pos = eol + 2;
  }
  if (!valid_request_line(lines[0], head.http10)) return error(400, "malformed request line");
  head.rewritten.reserve(text.size() + 2);
  head.rewritten.append(lines[0]);
  head.rewritten += "\r\n";

  std::vector<std::string_view> lengths;
  std::vector<std::string> codings;
  bool has_te = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      return error(400, "obsolete header line folding is not accepted");
    }
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return error(400, "malformed header line");
    const std::string_view name = line.substr(0, colon);
    for (const char c : name) {
      if (!is_tchar(static_cast<unsigned char>(c))) {
        return error(400, "malformed header name");
      }
    }
    const std::string_view value = trim_ows(line.substr(colon + 1));
    for (const char c : value) {
      if (is_ctl(static_cast<unsigned char>(c)) && c != '\t') {
        return error(400, "a control character in a header value");
      }
    }
    const std::string key = lower(name);
    if (key == "content-length") {
      for (const std::string_view v : split_list(value))
        lengths.push_back(v);
      continue;
    }
    if (key == "transfer-encoding") {
      has_te = true;
      for (const std::string_view v : split_list(value))
        codings.push_back(lower(v));
      continue;
    }
    if (key == "expect") {
      if (lower(value) != "100-continue") {
        return error(417, fmt::format("unsupported expectation '{}'", value));
      }
      head.expect_continue = !head.http10;
      continue;
    }
    head.rewritten.append(name);
    head.rewritten += ": ";
    head.rewritten.append(value);
    head.rewritten += "\r\n";
  }

  if (has_te) {
    if (head.http10) return error(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (!lengths.empty()) return error(400, "both Content-Length and Transfer-Encoding");
    if (codings.size() != 1 || codings[0] != "chunked") {
      std::string all;
      for (const auto& c : codings)
        all += (all.empty() ? "" : ", ") + c;
      return error(400, fmt::format("unsupported Transfer-Encoding '{}' (only chunked)", all));
    }
    head.chunked = true;
    return head;
  }
  if (!lengths.empty()) {
    for (const std::string_view v : lengths) {
      if (v.empty() ||
          !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return error(400, "Content-Length is not a number");
      }
      if (v != lengths[0]) return error(400, "conflicting Content-Length values");
    }
    const std::string_view v = lengths[0];
    const std::string_view digits = v.substr(std::min(v.find_first_not_of('0'), v.size()));
    if (digits.size() > kMaxDecimalDigits) {
      return error(413,
                   fmt::format("the request body is larger than {} bytes", limits.max_body_bytes));
    }
    const size_t n = digits.empty() ? 0 : std::stoull(std::string(digits));
    if (n > limits.max_body_bytes) {
      return error(413, fmt::format("the request body ({} bytes) is larger than {} bytes", n,
                                    limits.max_body_bytes));
    }
    head.content_length = n;
  }
  return head;
}

size_t ChunkedDecoder::fail(int status, std::string message) {
  failed_ = true;
  error_ = {status, std::move(message)};
  return 0;
}

size_t ChunkedDecoder::feed(std::string_view in, std::string& body) {
  size_t pos = 0;
  while (pos < in.size() && state_ != State::kDone && !failed_) {
    switch (state_) {
      case State::kSize: {
        const size_t eol = in.find("\r\n", pos);
        std::string_view line = in.substr(pos, eol == std::string_view::npos ? in.npos : eol - pos);
        // A line still arriving may end with the CR of its CRLF.
        if (eol == std::string_view::npos && !line.empty() && line.back() == '\r') {
          line.remove_suffix(1);
        }
        size_t digits = 0;
        size_t size = 0;
        while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
          if (digits == kMaxHexDigits) {
            return fail(413, fmt::format("the request body is larger than {} bytes",
                                         limits_.max_body_bytes));
          }
          const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(line[digits])));
          size = size * 16 + static_cast<size_t>(c <= '9' ? c - '0' : c - 'a' + 10);
          ++digits;
        }
        if (digits == 0 && !line.empty()) return fail(400, "malformed chunk size");
        std::string_view rest = line.substr(digits);
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
          rest.remove_prefix(1);
        if (!rest.empty() && rest.front() != ';') return fail(400, "malformed chunk size");
        for (const char c : rest) {
          if (is_ctl(static_cast<unsigned char>(c)) && c != '\t' && c != '\r') {
            return fail(400, "a control character in a chunk extension");
          }
        }
        if (eol == std::string_view::npos) {
          if (line.size() > kMaxChunkSizeLine) return fail(400, "chunk size line too long");
          return pos;  // wait for the rest of the line
        }
        if (digits == 0) return fail(400, "malformed chunk size");
        if (line.find('\r') != std::string_view::npos) return fail(400, "a bare CR in a chunk");
        if (size > limits_.max_body_bytes - std::min(body.size(), limits_.max_body_bytes)) {
          return fail(
              413, fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes));
        }
        pos = eol + 2;
        remaining_ = size;
        state_ = size == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        const size_t take = std::min(remaining_, in.size() - pos);
        body.append(in.substr(pos, take));
        pos += take;
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        if (in[pos] != '\r' || (pos + 1 < in.size() && in[pos + 1] != '\n')) {
          return fail(400, "chunk data is not followed by CRLF");
        }
        if (pos + 1 >= in.size()) return pos;
        pos += 2;
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        const size_t eol = in.find("\r\n", pos);
        const size_t len = (eol == std::string_view::npos ? in.size() : eol) - pos;
        if (trailer_bytes_ + len > limits_.max_head_bytes) {
          return fail(431, "the chunked body's trailers are too large");
        }
        if (eol == std::string_view::npos) return pos;
        if (len == 0) {
          state_ = State::kDone;
        } else if (in[pos] == ' ' || in[pos] == '\t' ||
                   in.substr(pos, len).find(':') == std::string_view::npos) {
          return fail(400, "malformed trailer line");
        }
        trailer_bytes_ += len + 2;
        pos = eol + 2;
        break;
      }
      case State::kDone:
        break;
    }
  }
  return pos;
}

}  // namespace kvserve::server
