#include "server/context.h"

#include "server/openai_format.h"

namespace dsv4::server {

ServerContext::ServerContext(Engine& e, const Tokenizer& t, std::string name)
    : engine(e), tok(t), model_name(std::move(name)), created(unix_time()), grammars(t, 0) {}

}  // namespace dsv4::server
