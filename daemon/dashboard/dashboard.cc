#include "daemon/dashboard/dashboard.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>

#include "daemon/dashboard/assets.h"
#include "daemon/node/http_request.h"

namespace elastic::dashboard {
namespace {

using nlohmann::json;

constexpr std::string_view kHtml = "text/html; charset=utf-8";

struct Asset {
  std::string_view path;
  std::string_view content_type;
  const std::string_view* body;
};

// Every page is the same shell; dashboard.js draws the one its path names.
const std::array kAssets = {
    Asset{"/", kHtml, &assets::kPageHtml},
    Asset{"/jobs", kHtml, &assets::kPageHtml},
    Asset{"/job", kHtml, &assets::kPageHtml},
    Asset{"/incidents", kHtml, &assets::kPageHtml},
    Asset{"/log", kHtml, &assets::kPageHtml},
    Asset{"/dashboard.css", "text/css; charset=utf-8", &assets::kCss},
    Asset{"/dashboard.js", "text/javascript; charset=utf-8", &assets::kJs},
};

// The read-only verbs the dashboard asks (control/verbs.h names them).
constexpr std::array<std::string_view, 8> kApiVerbs = {"status", "nodes",   "jobs",   "job",
                                                       "events", "drained", "voters", "logs"};
// A log tail's size: the end of the rank's file.
constexpr std::uint64_t kLogTailBytes = 64 * 1024;

// A query value as a whole number below `limit`, or an error naming the parameter.
bool query_number(std::string_view query, std::string_view key, std::uint64_t limit,
                  std::optional<std::uint64_t>& out, std::string& error) {
  const std::string text = node::query_value(query, key);
  if (text.empty()) return true;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n > limit) {
    error = "The \"" + std::string(key) + "\" parameter must be a whole number up to " +
            std::to_string(limit) + ".";
    return false;
  }
  out = n;
  return true;
}

Route bad_request(std::string error) {
  Route r;
  r.kind = Route::Kind::kBadRequest;
  r.error = std::move(error);
  return r;
}

// A query value as the string it names, or an error naming the parameter.
bool query_string(std::string_view query, std::string_view key, std::string& out,
                  std::string& error) {
  out = node::query_value(query, key);
  if (out.size() > 256) {
    error = "The \"" + std::string(key) + "\" parameter is longer than 256 bytes.";
    return false;
  }
  return true;
}

}  // namespace

Route route(std::string_view path, std::string_view query) {
  for (const Asset& asset : kAssets) {
    if (asset.path != path) continue;
    Route r;
    r.kind = Route::Kind::kAsset;
    r.content_type = asset.content_type;
    r.body = *asset.body;
    return r;
  }
  constexpr std::string_view kApi = "/api/";
  if (path.substr(0, kApi.size()) != kApi) return {};
  const std::string_view verb = path.substr(kApi.size());
  bool known = false;
  for (const std::string_view v : kApiVerbs) known = known || v == verb;
  if (!known) return {};

  json request = {{"verb", std::string(verb)}};
  std::string error;
  if (verb == "job") {
    std::string id;
    if (!query_string(query, "id", id, error)) return bad_request(error);
    if (id.empty()) return bad_request("/api/job needs ?id=<job id>.");
    request["job"] = id;
  } else if (verb == "events") {
    std::string job, limit;
    if (!query_string(query, "job", job, error) || !query_string(query, "limit", limit, error)) {
      return bad_request(error);
    }
    if (!job.empty()) request["job"] = job;
    if (!limit.empty()) {
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), n);
      if (ec != std::errc() || end != limit.data() + limit.size() || n == 0 || n > 100'000) {
        return bad_request("The \"limit\" parameter must be a number from 1 to 100000.");
      }
      request["limit"] = n;
    }
  } else if (verb == "logs") {
    std::string job, node_name;
    std::optional<std::uint64_t> rank, round;
    if (!query_string(query, "job", job, error) || !query_string(query, "node", node_name, error) ||
        !query_number(query, "rank", UINT32_MAX, rank, error) ||
        !query_number(query, "round", UINT64_MAX / 2, round, error)) {
      return bad_request(error);
    }
    if (job.empty() || !rank) return bad_request("/api/logs needs ?job=<job id>&rank=<rank>.");
    request["job"] = job;
    request["rank"] = *rank;
    request["max_bytes"] = kLogTailBytes;
    if (round) request["round"] = *round;
    if (!node_name.empty()) request["node"] = node_name;
  }
  Route r;
  r.kind = Route::Kind::kApi;
  r.verb = std::string(verb);
  r.operator_only = verb == "logs";
  r.request = request.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

int api_status(std::string_view reply) {
  const json value = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  return value.is_object() ? 200 : 502;
}

}  // namespace elastic::dashboard
