// A TCP port for a test's rendezvous (tests of the TCP communicator and of TCP rank groups).
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dsv4::test {

// A port nobody listens on now: the kernel's pick for port 0 on 127.0.0.1, released. 0 when no socket
// could be had.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace dsv4::test
