// Presenting a Discovery: the readable table `fact discover` prints and its JSON form.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fact/discover/discover.hpp"

namespace fact::discover {

// A header line (module, capture, node counts, precision, device profile), one row per match
// (#, match, pattern, nodes covered, shape MxNxK / batch x (MxNxK), dtype, est. before / after /
// saved in µs, classification, status) with one sub-row per kernel when a match has several,
// a totals line, then one line per declined match with its reason.
std::string discovery_table(const Discovery& discovery, const graph::Graph& captured,
                            const DiscoverOptions& options);

// {"schema": "fact.discovery/1", "source": captured.source, "precision", "device": {profile},
//  "matches": [match_to_json...], "totals": {"est_before_us", "est_after_us", "est_saved_us"}}
// (totals over accepted matches).
nlohmann::json discovery_to_json(const Discovery& discovery, const graph::Graph& captured,
                                 const DiscoverOptions& options);

nlohmann::json device_profile_to_json(const DeviceProfile& profile);
// Fields absent from `j` keep their defaults; throws std::invalid_argument for a field of the
// wrong type.
DeviceProfile device_profile_from_json(const nlohmann::json& j);

}  // namespace fact::discover
