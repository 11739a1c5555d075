// The test-only GCS endpoint of fake_gcs_server.h: the socket loops, ranged GETs, resumable
// uploads and the scripted faults (request parsing and plain answers: fake_gcs_request.h).
#include "cc/gcsio/fake_gcs_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/fake_gcs_request.h"

namespace gcsio {
namespace {

using fake_gcs::ParseRequest;
using fake_gcs::SendAll;
using fake_gcs::StatusHead;

constexpr auto kHoldLimit = std::chrono::seconds(60);  // only a broken test waits this long

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
  // Reads more of the connection into `buffer` until `ready()`; false when the peer closed.
  auto receive_until = [fd, &buffer](auto ready) {
    char chunk[4096];
    while (!ready()) {
      const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    return true;
  };
  bool open = true;
  while (open) {
    size_t head_end = std::string::npos;
    if (!receive_until([&] { return (head_end = buffer.find("\r\n\r\n")) != std::string::npos; })) {
      break;
    }
    const std::string head = buffer.substr(0, head_end + 2);
    buffer.erase(0, head_end + 4);
    Request request;
    if (!ParseRequest(head, &request)) {
      SendAll(fd, StatusHead(400, 0));
      break;
    }
    if (!receive_until([&] { return buffer.size() >= request.body_bytes; })) break;
    const std::string body = buffer.substr(0, request.body_bytes);
    buffer.erase(0, request.body_bytes);
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
    open = request.kind == "media" ? Answer(fd, request, reply)
                                   : AnswerUpload(fd, request, reply, body);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(fd);
  }
  close(fd);
}

bool FakeGcsServer::Get(const std::string& bucket, const std::string& object, std::string* data,
                        int64_t* generation) const {
  bool found = false;
  *data = ObjectBytes(bucket, object, &found, generation);
  return found;
}

bool FakeGcsServer::AnswerUpload(int fd, const Request& request, const Reply& reply,
                                 const std::string& body) {
  if (reply.action == Action::kStatus) {
    return SendAll(fd, StatusHead(reply.status, reply.body.size()) + reply.body);
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto generation_of = [this](const std::string& bucket, const std::string& object) {
    auto it = objects_.find({bucket, object});
    return it == objects_.end() ? int64_t{0} : it->second.second;
  };
  auto precondition_failed = [&](const Session& s) {
    return s.if_generation_match >= 0 && generation_of(s.bucket, s.object) != s.if_generation_match;
  };
  const std::string failed412 = R"({"error": {"code": 412, "message": "conditionNotMet"}})";
  if (request.kind == "upload_start") {
    Session s;
    s.bucket = request.bucket;
    s.object = request.object;
    s.if_generation_match = request.if_generation_match;
    if (precondition_failed(s)) {
      lock.unlock();
      return SendAll(fd, StatusHead(412, failed412.size()) + failed412);
    }
    const std::string id = "s" + std::to_string(next_session_++);
    sessions_[id] = std::move(s);
    lock.unlock();
    return SendAll(fd, "HTTP/1.1 200 OK\r\nLocation: " + endpoint() + "/upload/storage/v1/b/" +
                           request.bucket + "/o?uploadType=resumable&upload_id=" + id +
                           "\r\nContent-Length: 0\r\n\r\n");
  }
  auto it = sessions_.find(request.upload_id);
  if (it == sessions_.end() || reply.action == Action::kExpireSession) {
    if (it != sessions_.end()) sessions_.erase(it);
    lock.unlock();
    const int status = reply.action == Action::kExpireSession ? reply.status : 404;
    return SendAll(fd, StatusHead(status, 0));
  }
  Session& s = it->second;
  const std::string cr = request.content_range.substr(6);  // after "bytes "
  const size_t slash = cr.find('/');
  s.total = std::stoull(cr.substr(slash + 1));
  if (request.kind == "upload_chunk" && !s.finished) {
    const size_t dash = cr.find('-');
    const uint64_t first = std::stoull(cr.substr(0, dash));
    if (first > s.data.size()) {
      lock.unlock();
      return SendAll(fd, StatusHead(400, 0));
    }
    uint64_t keep = body.size();
    if (reply.action == Action::kKeepPartAndReset)
      keep = std::min<uint64_t>(keep, reply.body_bytes);
    if (first + keep > s.data.size())
      s.data += body.substr(s.data.size() - first, first + keep - s.data.size());
    if (reply.action == Action::kKeepPartAndReset) return false;  // close without an answer
  }
  if (!s.finished && s.data.size() == s.total) {  // complete (a query completes an empty one)
    if (precondition_failed(s)) {
      sessions_.erase(it);
      lock.unlock();
      return SendAll(fd, StatusHead(412, failed412.size()) + failed412);
    }
    const int64_t generation = next_generation_++;
    uint32_t crc = Crc32c(s.data.data(), s.data.size());
    if (reply.action == Action::kWrongCrc32c) crc ^= 0x1;
    objects_[{s.bucket, s.object}] = {s.data, generation};
    s.finished = true;
    s.resource = R"({"kind": "storage#object", "bucket": ")" + s.bucket + R"(", "name": ")" +
                 s.object + R"(", "size": ")" + std::to_string(s.data.size()) +
                 R"(", "generation": ")" + std::to_string(generation) + R"(", "crc32c": ")" +
                 Crc32cBase64(crc) + R"("})";
  }
  if (s.finished) {
    const std::string resource = s.resource;
    lock.unlock();
    return SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(resource.size()) + "\r\n\r\n" + resource);
  }
  const std::string range =
      s.data.empty() ? "" : "Range: bytes=0-" + std::to_string(s.data.size() - 1) + "\r\n";
  lock.unlock();
  return SendAll(fd, "HTTP/1.1 308 Resume Incomplete\r\n" + range + "Content-Length: 0\r\n\r\n");
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

std::string TestPattern(uint64_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (uint64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x >> 56);
  }
  return s;
}

}  // namespace gcsio
