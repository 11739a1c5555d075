#include "cc/gcsio/fake_gcs_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

namespace gcsio {
namespace {

constexpr auto kHoldLimit = std::chrono::seconds(60);  // only a broken test waits this long

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

// Parses "GET {target} HTTP/1.1" and its headers; false for anything else.
bool ParseRequest(const std::string& head, FakeGcsServer::Request* r) {
  const size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  if (line.rfind("GET ", 0) != 0) return false;
  const size_t target_end = line.find(' ', 4);
  if (target_end == std::string::npos) return false;
  const std::string target = line.substr(4, target_end - 4);
  const std::string prefix = "/download/storage/v1/b/";
  if (target.rfind(prefix, 0) != 0) return false;
  const size_t o = target.find("/o/", prefix.size());
  if (o == std::string::npos) return false;
  const size_t q = target.find('?', o);
  r->bucket = PercentDecode(target.substr(prefix.size(), o - prefix.size()));
  r->object = PercentDecode(target.substr(o + 3, q == std::string::npos ? q : q - o - 3));
  if (q != std::string::npos) {
    const std::string query = "&" + target.substr(q + 1);
    const size_t g = query.find("&generation=");
    if (g != std::string::npos) r->generation = std::stoll(query.substr(g + 12));
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
    if (name == "range") {
      r->range = value;
      const size_t dash = value.find('-');
      if (value.rfind("bytes=", 0) != 0 || dash == std::string::npos) return false;
      r->first = std::stoull(value.substr(6, dash - 6));
      r->last = std::stoull(value.substr(dash + 1));
    } else if (name == "authorization") {
      r->authorization = value;
    }
  }
  return !r->range.empty();
}

std::string StatusHead(int status, size_t content_length) {
  return "HTTP/1.1 " + std::to_string(status) + " Status\r\nContent-Type: text/plain\r\n" +
         "Content-Length: " + std::to_string(content_length) + "\r\n\r\n";
}

}  // namespace

FakeGcsServer::FakeGcsServer() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) throw std::runtime_error("socket() failed");
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 128) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listen_fd_);
    throw std::runtime_error("cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeGcsServer::~FakeGcsServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  for (std::thread& t : handlers_) t.join();
}

std::string FakeGcsServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

void FakeGcsServer::Put(const std::string& bucket, const std::string& object, std::string data,
                        int64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_[{bucket, object}] = {std::move(data), generation};
}

void FakeGcsServer::SetScript(Script script) {
  std::lock_guard<std::mutex> lock(mu_);
  script_ = std::move(script);
}

void FakeGcsServer::HoldUntilConcurrent(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_until_ = n;
}

void FakeGcsServer::ReleaseHung() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hung_released_ = true;
  }
  cv_.notify_all();
}

std::vector<FakeGcsServer::Request> FakeGcsServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

int FakeGcsServer::request_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(requests_.size());
}

int FakeGcsServer::max_concurrent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_active_;
}

bool FakeGcsServer::WaitForRequests(int n, double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                      [&] { return static_cast<int>(requests_.size()) >= n; });
}

bool FakeGcsServer::WaitForHungEnded(int n, double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                      [&] { return hung_ended_ >= n; });
}

void FakeGcsServer::AcceptLoop() {
  while (true) {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      if (fd >= 0) close(fd);
      return;
    }
    if (fd < 0) continue;
    connections_.insert(fd);
    handlers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeGcsServer::Serve(int fd) {
  std::string buffer;
  char chunk[4096];
  bool open = true;
  while (open) {
    size_t head_end;
    while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        open = false;
        break;
      }
      buffer.append(chunk, static_cast<size_t>(n));
    }
    if (!open) break;
    const std::string head = buffer.substr(0, head_end + 2);
    buffer.erase(0, head_end + 4);
    Request request;
    if (!ParseRequest(head, &request)) {
      SendAll(fd, StatusHead(400, 0));
      break;
    }
    Reply reply;
    {
      std::unique_lock<std::mutex> lock(mu_);
      request.index = static_cast<int>(requests_.size());
      requests_.push_back(request);
      max_active_ = std::max(max_active_, ++active_);
      cv_.notify_all();
      if (hold_until_ > 0 && active_ >= hold_until_) hold_until_ = 0;
      if (!cv_.wait_for(lock, kHoldLimit, [&] { return hold_until_ == 0 || stopping_; })) {
        hold_until_ = 0;
      }
      // Counted until the answer starts: a client can send its next request only after that.
      --active_;
      cv_.notify_all();
      if (script_) reply = script_(request);
    }
    open = Answer(fd, request, reply);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(fd);
  }
  close(fd);
}

std::string FakeGcsServer::ObjectBytes(const std::string& bucket, const std::string& object,
                                       bool* found, int64_t* generation) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find({bucket, object});
  *found = it != objects_.end();
  if (!*found) return "";
  *generation = it->second.second;
  return it->second.first;
}

bool FakeGcsServer::Answer(int fd, const Request& request, const Reply& reply) {
  if (reply.action == Action::kStatus) {
    return SendAll(fd, StatusHead(reply.status, reply.body.size()) + reply.body);
  }
  bool found = false;
  int64_t generation = 0;
  const std::string data = ObjectBytes(request.bucket, request.object, &found, &generation);
  if (!found) {
    const std::string body = "No such object: " + request.bucket + "/" + request.object;
    return SendAll(fd, StatusHead(404, body.size()) + body);
  }
  const uint64_t size = data.size();
  if (request.first >= size || request.last < request.first) {
    return SendAll(fd, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */" +
                           std::to_string(size) + "\r\nContent-Length: 0\r\n\r\n");
  }
  const uint64_t last = std::min(request.last, size - 1);
  const uint64_t length = last - request.first + 1;
  const std::string head =
      "HTTP/1.1 206 Partial Content\r\nContent-Type: application/octet-stream" +
      std::string("\r\nContent-Range: bytes ") + std::to_string(request.first) + "-" +
      std::to_string(last) + "/" + std::to_string(size) +
      "\r\nContent-Length: " + std::to_string(length) +
      "\r\nx-goog-generation: " + std::to_string(generation) + "\r\n\r\n";
  const char* body = data.data() + request.first;
  if (reply.action == Action::kServe) return SendAll(fd, head) && SendAll(fd, body, length);
  const uint64_t part = std::min(reply.body_bytes, length);
  const bool sent = SendAll(fd, head) && SendAll(fd, body, part);
  if (reply.action == Action::kShortBody) return false;  // close before the rest
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return hung_released_ || stopping_; });
  }
  if (sent) SendAll(fd, body + part, length - part);  // fails if the client has gone
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++hung_ended_;
  }
  cv_.notify_all();
  return false;
}

}  // namespace gcsio
