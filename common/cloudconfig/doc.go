// Package cloudconfig is the typed model of the Kairos configuration document
// that kairos-capi hands to a node as bootstrap data.
//
// Kairos does not run cloud-init: yip reads the document, and provider-kairos
// reads the k0s/k3s blocks. Both are unforgiving in ways that are silent on
// the node, so the model encodes the rules instead of leaving them to string
// templates:
//
//   - the "#cloud-config" header is always the first line, otherwise the
//     cloud-init style keys (users, write_files, hostname) are ignored;
//   - user groups are a YAML list (a comma string breaks the document);
//   - stage file and directory permissions are YAML integers: yip decodes them
//     into a number, and one quoted "0644" makes it drop every stage of the
//     document. They are written in decimal (unambiguous for YAML 1.1 and 1.2
//     parsers alike) with the octal spelling as a trailing comment;
//   - top-level write_files permissions are octal strings, as cloud-init has
//     them.
//
// Marshal writes the document straight from the structs with a small block
// YAML writer (internal/yamlenc, which says why it is not yaml.v3's encoder):
// it is deterministic (maps sorted, stages in execution order) and cheap. The yaml tags describe the same
// schema for decoding (see Unmarshal) and for other YAML libraries.
package cloudconfig
