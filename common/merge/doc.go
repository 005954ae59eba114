// Package merge combines a generated Kairos cloud-config with user-supplied
// cloud-config fragments, following the Metal3 userdata merge proposal.
//
// Bare-metal nodes need per-host configuration (bonds, VLANs, drivers) that a
// bootstrap provider rendering from a template cannot know. Rather than
// letting users replace the generated document, which would silently drop
// what Cluster API needs, fragments are merged into it with rules that never
// let one source override another:
//
//   - Each fragment is appended (the default) or prepended.
//   - Lists concatenate: items of prepend fragments come before the items of
//     the base document, items of append fragments after it; fragments of the
//     same position keep the order in which they are given. List items are
//     never merged with each other.
//   - Maps merge recursively.
//   - A scalar key set by two sources, or a key whose value is a map in one
//     source and a list or scalar in another, is an error that names the key
//     path and both sources, e.g.
//     key "hostname" is set by both "generated" and fragment "net".
//     Equal values conflict too: nothing is ever silently overridden.
//   - A file written by two sources is an error naming both, whether it comes
//     from write_files[].path, stages.*[].files[].path or
//     stages.*[].downloads[].path (paths are compared after cleaning).
//   - A fragment that is not a YAML map (or holds more than one document, or
//     repeats a key) is an error naming it.
//
// The result starts with the "#cloud-config" header. Keys keep the order of
// the base document; keys that only fragments set follow, in the order the
// fragments are given. YAML aliases and merge keys (<<) are expanded, so the
// output never refers to an anchor of another source. Fragments are not
// escaped: yip template expressions in them are rendered on the node, which
// is how a fragment can use per-machine facts on purpose.
//
// MergeValues applies the same rules to decoded values (map[string]any), for
// configuration files that are merged before they are embedded in a
// document, such as a k0s ClusterConfig.
package merge
