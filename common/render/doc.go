// Package render turns a Node (one Machine's bootstrap needs) into the Kairos
// cloud-config a node consumes, for k0s and k3s, control planes and workers.
//
// The node reads its bootstrap data once: the Kairos agent starts the
// distribution a single time and marks the node as bootstrapped. So the
// renderer refuses to produce a document until everything is known (endpoint,
// PKI, tokens), validates every field, and uses every field it accepts.
//
// What a rendered document does on the node, in boot order:
//
//   - initramfs (cloud-init keys): hostname.
//   - boot.before: "kairos-capi boot assessment arm" writes boot-assessment.sh and, on the
//     first boots of a Kairos release other than the last verified one, sets GRUB's boot
//     assessment variables again after Kairos' own step cleared them, so that a reboot before
//     the distribution is ready boots the fallback image (bootassessment.go).
//   - boot: users, then the step
//     "kairos-capi bootstrap files" writes the distribution config, token,
//     PKI, manifests and the kairos-capi scripts and units, then
//     "kairos-capi user files" writes Node.Files (after the users exist, so
//     "user:group" owners resolve).
//   - network: "kairos-capi pre-commands" runs PreCommands once, then
//     "kairos-capi bootstrap sentinel" starts kairos-capi-bootstrap.service
//     and "kairos-capi boot assessment verify" kairos-capi-boot-assessment.service
//     without waiting for them. The Kairos agent (kairos-agent.service, ordered
//     after cos-setup-network.service, which runs this stage) only starts the
//     k0s/k3s service after the stage has finished, so files and pre-commands
//     are in place first. These steps are skipped on the live installer and
//     in recovery.
//   - The distribution service carries a systemd drop-in whose ExecStartPre
//     is preflight.sh: the service refuses to start unless the pre-commands
//     completed and, until the node has bootstrapped once
//     (BootstrapDoneMarker), the installed k0s/k3s matches
//     KubernetesVersion. Later boots may run a k0s/k3s an in-place upgrade
//     installed.
//   - kairos-capi-bootstrap.service waits until the service is active and
//     serving (API /readyz on control planes, a kubelet kubeconfig on
//     workers), runs PostCommands once, and only then writes
//     /run/cluster-api/bootstrap-success.complete and BootstrapDoneMarker.
//   - kairos-capi-boot-assessment.service waits for the same readiness, records
//     the running Kairos release as verified and clears what arm set; on a boot
//     that arm armed it reboots into the fallback image after
//     BootAssessmentTimeout instead.
//
// yip renders Go templates in file contents and commands, so all generated
// and user-supplied content is escaped (EscapeTemplates) and reaches the disk
// byte for byte. Only HostnamePrefix templates on purpose, and user fragments
// passed to Document are merged unescaped.
//
// Document also reads every user fragment and the merged result as a node
// does (cloudconfig.CheckFragment, CheckNode) and applies the rules for user
// input to every source: managed and per-role flags in any spelling (args.go),
// manifests as Kubernetes objects (manifests.go), the k0s ClusterConfig
// against k0s' fields (k0s_schema.go), the Cluster's network (network.go).
// Every problem is a *FieldError naming the Node field (or "Fragments[i]").
//
// The generated script and unit paths are exported so that tests (and a
// simulated node) can follow what a real node would do.
package render
