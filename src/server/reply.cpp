#include "server/reply.h"

namespace dsv4::server {

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Reply Reply::json(const Json& j, int status) {
  Reply r;
  r.status = status;
  r.body = dump_json(j);
  return r;
}

}  // namespace dsv4::server
