// Package simnode simulates Kairos machines that consume Cluster API bootstrap data the way a
// real Kairos node does, and the workload clusters they form.
//
// A Node is handed the bootstrap Secret's value by the test infrastructure provider. It then:
//
//   - loads the document with test/cloudconfig exactly as a node would: Check must pass, or the
//     node refuses it (phase Refused, reason BootstrapDataRefused); the files the document
//     writes (RenderedFiles, after yip's templating) are written below a per-node root
//     directory, so tests can read what the node received;
//   - finds its distribution and role in the k0s, k0s-worker, k3s or k3s-agent block and its
//     args, and runs the preflight the document ships (the want= line of preflight.sh against
//     the machine's installed version): on a mismatch it refuses to start the distribution
//     (reason PreflightFailed);
//   - starts or joins the cluster: the first control-plane node starts a real etcd and
//     kube-apiserver on the cluster endpoint with exactly the PKI it was given; joining
//     controllers and workers authenticate with exactly the token they were given (k0s worker:
//     real bootstrap-token authentication and a CertificateSigningRequest against the
//     workload API server; k0s controller: the checks of k0s' join API; k3s: the CA hash the
//     token pins, then the supervisor's passwd file, whose "server" password joins servers and
//     whose "node" password, from the init server's --agent-token-file, joins agents), and
//     fail with reason JoinFailed otherwise (retrying); a joining k3s server whose agent token
//     is not the cluster's, or missing, is refused (BootstrapDataRefused);
//   - registers its Node (providerID, labels, taints, Ready) with a kubelet client certificate,
//     joins etcd (k0s EtcdMember objects, k3s Node annotations) when it is a server, applies the
//     manifests of its manifest directory, and only then writes
//     /run/cluster-api/bootstrap-success.complete below its root.
//
// A node boots a Kairos image (NodeSpec.Image, by default KairosImage of its distribution and
// version) and keeps an active and a passive image (Node.Images). Node.Upgrade (or a NodeOpUpgrade
// carried out by the Kairos operator, which a cluster runs once the operator's NodeOpUpgrade CRD is
// applied to it: Cluster.InstallKairosOperator, or a user's kubectl apply) writes a new
// active image and reboots: the kubelet, the distribution and the etcd member stop and start again
// from the same data. Which image boots is GRUB's boot assessment's choice, with Kairos' rules
// (bootassessment.go): an image that does not boot (Registry.BreakImage) comes back to GRUB after
// BootAssessmentPeriod and falls back to the passive image; an image that boots but whose
// distribution refuses to start (the other distribution, a version skew, the preflight) falls back
// only when the document arms and verifies the boot (kairos-capi's documents do: the verify step
// reboots after VerifyTimeout), and otherwise stays, without Kubernetes (see image.go, upgrade.go,
// operator.go).
//
// A control-plane node whose document configures etcd snapshots (docs/backups.md) takes them as
// its distribution would (snapshots.go): a k3s server with its own schedule, naming, S3 upload
// (a real S3 client over HTTPS) and retention from its config.yaml.d keys; a k0s controller by
// running the rendered timer's service (the rendered etcd-snapshot.sh with the host's sh and
// curl) on its OnCalendar schedule. The node's `k0s backup` and `k3s etcd-snapshot` are the test
// binary run again as those commands (snapshothelper.go): real snapshots of the node's own
// member. Node.Upgrade runs the document's before-upgrade stage first, as kairos-agent does (a
// failing step aborts the upgrade only in strict mode). Node.Snapshots and LastSnapshotError
// say what was taken or why not (a store that refuses the keys, another CA, no listener).
// Restore (restore.go) is etcd's own (etcdutl): an init node whose document restores runs the
// rendered restore drop-in before its etcd starts, whose `k3s server --cluster-reset
// --cluster-reset-restore-path` and `k0s restore` are the node's own commands; the restored
// node reports what it restored with its `kubectl apply` (the admin kubeconfig the simulated
// server writes where k3s and k0s write theirs). RestoreEtcdSnapshot, EtcdKeys and
// K0sBackupEntries read snapshots back.
//
// A Cluster is the simulated workload cluster, keyed by its endpoint. Its API server belongs to
// the cluster, not to the node that started it: it keeps running when that node goes away and
// stops with Registry.StopCluster (KairosSimCluster deletion) or Registry.Close.
//
// Everything runs in the test process except etcd and kube-apiserver, which are the envtest
// binaries (framework.Assets) started as child processes that die with the test process.
package simnode
