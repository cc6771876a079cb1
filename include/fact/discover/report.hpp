// Presenting a Discovery: the readable table `fact discover` prints and its JSON form.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fact/discover/discover.hpp"

namespace fact::discover {

// A header line (module, capture, node counts, precision, device profile), one row per match
// (#, match, pattern, nodes covered, shape (the kind's: MxNxK for a GEMM), dtype, est. before / after /
// saved in µs, classification, status) with one sub-row per kernel when a match has several,
// a totals line, the legend (discovery_legend), a note naming accepted matches that save no
// estimated time and why they stay accepted, one line per accepted match with a note (its
// Match::extra "note": "note #3 gemm_bias: K padded 770→776"), then one line per declined match
// with its reason.
std::string discovery_table(const Discovery& discovery, const graph::Graph& captured,
                            const DiscoverOptions& options);

// Two lines: what before/after/saved µs are (roofline estimates from the device profile) and
// what REUSE / ADAPT / NEW mean (classification_legend).
std::string discovery_legend(const DiscoverOptions& options);

// What REUSE / ADAPT / NEW mean for these options (against the pattern registry when
// options.registry is set, else against the tuning database), one paragraph without a line
// break. The one definition: the terminal's legend (discovery_legend) and the `fact optimize`
// report's "How to read" both print it.
std::string classification_legend(const DiscoverOptions& options);

// The discovery table as Markdown for a report: one row per match (the columns of
// discovery_table, a sub-row per kernel call), the totals line and a bullet per accepted match
// with a note. Reasons are not repeated here: a declined or pending match's status points at
// the report's "Left to PyTorch" table.
std::string discovery_markdown(const Discovery& discovery);

// {"schema": "fact.discovery/1", "source": captured.source, "precision", "device": {profile},
//  "matches": [match_to_json...], "totals": {"est_before_us", "est_after_us", "est_saved_us"}}
// (totals over accepted matches).
nlohmann::json discovery_to_json(const Discovery& discovery, const graph::Graph& captured,
                                 const DiscoverOptions& options);

// The device profile's JSON (fact/problem/device_profile.hpp).
using fact::device_profile_from_json;
using fact::device_profile_to_json;

}  // namespace fact::discover
