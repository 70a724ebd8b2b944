// The HTTP front: binds the route table to cpp-httplib, with the one wrapper that turns exceptions
// into OpenAI error JSON, API-key checks, streaming bodies (a client that goes away cancels its
// request) and per-route request counting. Only this file knows the HTTP library.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "server/context.h"

namespace dsv4::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: a free port (bind() tells which)
  std::string api_key;                // when set, /v1/* needs "Authorization: Bearer KEY"
  int threads = 64;                   // connections served at once; a streaming client holds one
  size_t max_body_bytes = 64u << 20;  // larger requests get 413
};

class HttpServer {
 public:
  HttpServer(ServerContext& ctx, HttpOptions opt);
  ~HttpServer();
  int bind();  // starts listening; returns the port. Throws dsv4::Error when the address is taken.
  void run();  // accepts connections until stop(); waits for the connections being served
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
