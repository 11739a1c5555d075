#include "cc/gcsio/fake_gcs_request.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>

namespace gcsio::fake_gcs {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The value of query parameter `name` in "a=1&b=2" (percent-decoded), "" if absent.
std::string QueryParam(const std::string& query, const std::string& name) {
  const std::string q = "&" + query;
  const size_t at = q.find("&" + name + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + name.size() + 2;
  const size_t end = q.find('&', start);
  return PercentDecode(q.substr(start, end == std::string::npos ? end : end - start));
}

}  // namespace

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool SendAll(int fd, const std::string& s) { return SendAll(fd, s.data(), s.size()); }

// Parses "GET|POST|PUT {target} HTTP/1.1" and its headers: media GETs with a Range, resumable
// upload starts, chunks and status queries; false for anything else.
bool ParseRequest(const std::string& head, FakeGcsServer::Request* r) {
  const size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  const size_t sp = line.find(' ');
  if (sp == std::string::npos) return false;
  r->method = line.substr(0, sp);
  const size_t target_end = line.find(' ', sp + 1);
  if (target_end == std::string::npos) return false;
  const std::string target = line.substr(sp + 1, target_end - sp - 1);
  const bool get = r->method == "GET";
  const std::string prefix = get ? "/download/storage/v1/b/" : "/upload/storage/v1/b/";
  if (!get && r->method != "POST" && r->method != "PUT") return false;
  if (target.rfind(prefix, 0) != 0) return false;
  const size_t q = target.find('?');
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  const size_t o = target.find("/o", prefix.size());
  if (o == std::string::npos) return false;
  r->bucket = PercentDecode(target.substr(prefix.size(), o - prefix.size()));
  if (get) {
    if (target.compare(o, 3, "/o/") != 0) return false;
    r->object = PercentDecode(target.substr(o + 3, q == std::string::npos ? q : q - o - 3));
    const std::string g = QueryParam(query, "generation");
    if (!g.empty()) r->generation = std::stoll(g);
    r->kind = "media";
  } else {
    if (QueryParam(query, "uploadType") != "resumable") return false;
    r->object = QueryParam(query, "name");
    const std::string g = QueryParam(query, "ifGenerationMatch");
    if (!g.empty()) r->if_generation_match = std::stoll(g);
    r->upload_id = QueryParam(query, "upload_id");
    if (r->method == "POST") {
      r->kind = "upload_start";
    } else if (r->upload_id.empty()) {
      return false;
    }
  }
  size_t pos = line_end + 2;
  while (pos < head.size()) {
    const size_t end = head.find("\r\n", pos);
    const std::string header = head.substr(pos, end - pos);
    pos = end == std::string::npos ? head.size() : end + 2;
    const size_t colon = header.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(header.substr(0, colon));
    std::string value = header.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (name == "range" && get) {
      r->range = value;
      const size_t dash = value.find('-');
      if (value.rfind("bytes=", 0) != 0 || dash == std::string::npos) return false;
      r->first = std::stoull(value.substr(6, dash - 6));
      r->last = std::stoull(value.substr(dash + 1));
    } else if (name == "authorization") {
      r->authorization = value;
    } else if (name == "content-range") {
      r->content_range = value;
    } else if (name == "content-length") {
      r->body_bytes = std::stoull(value);
    }
  }
  if (r->method == "PUT") {
    if (r->content_range.rfind("bytes ", 0) != 0) return false;
    r->kind = r->content_range.rfind("bytes */", 0) == 0 ? "upload_query" : "upload_chunk";
  }
  return !get || !r->range.empty();
}

std::string StatusHead(int status, size_t content_length) {
  return "HTTP/1.1 " + std::to_string(status) + " Status\r\nContent-Type: text/plain\r\n" +
         "Content-Length: " + std::to_string(content_length) + "\r\n\r\n";
}

}  // namespace gcsio::fake_gcs
