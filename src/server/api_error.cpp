#include "server/api_error.h"

#include "core/error.h"
#include "io/json_text.h"
#include "runtime/engine.h"

namespace dsv4::server {
namespace {

// Messages quote what the client sent (a role, a tool's name, a key): one line, and short.
constexpr size_t kMaxMessage = 400;

std::string type_for(int status) {
  if (status == 401) return "authentication_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

}  // namespace

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_)
    : std::runtime_error(json_text::printable(message, kMaxMessage)), status(status_), type(type_for(status_)), param(std::move(param_)),
      code(std::move(code_)) {}

ApiError invalid_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, message, param, code);
}

Json error_json(const ApiError& e) {
  Json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return Json{{"error", std::move(err)}};
}

ApiError to_api_error(std::exception_ptr ep, const std::string& prompt_param) {
  try {
    std::rethrow_exception(ep);
  } catch (const ApiError& e) {
    return e;
  } catch (const RequestRejected& e) {
    using R = RequestRejected::Reason;
    switch (e.reason) {
      case R::TooLong: return ApiError(400, e.what(), prompt_param, "context_length_exceeded");
      case R::Invalid: return ApiError(400, e.what(), prompt_param);
      case R::Overloaded: return ApiError(503, e.what(), "", "overloaded");
      case R::Stopping: return ApiError(503, e.what(), "", "shutting_down");
    }
    return ApiError(500, e.what());
  } catch (const nlohmann::json::exception& e) {
    return ApiError(400, std::string("invalid request: ") + e.what());
  } catch (const Error& e) {
    return ApiError(400, e.what());
  } catch (const std::exception& e) {
    return ApiError(500, std::string("internal error: ") + e.what());
  } catch (...) {
    return ApiError(500, "internal error");
  }
}

}  // namespace dsv4::server
