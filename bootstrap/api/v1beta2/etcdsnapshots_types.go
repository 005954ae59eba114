package v1beta2

import (
	"path"
	"strings"
)

// Defaults of EtcdSnapshots, applied only when etcdSnapshots is set (so that adding them in a
// release changes no existing Machine). Schedule and retention are k3s' own defaults
// (docs.k3s.io/cli/etcd-snapshot: "at 00:00 and 12:00 system time, with 5 snapshots
// retained"), so that both distributions behave alike when the user says nothing; the region is
// the one k3s and the AWS SDKs assume ("defaults to us-east-1").
const (
	DefaultEtcdSnapshotSchedule  = "0 */12 * * *"
	DefaultEtcdSnapshotRetention = int32(5)
	DefaultEtcdSnapshotS3Region  = "us-east-1"
)

// Keys of the Secret that EtcdSnapshotS3.CredentialsSecret names. Fixed names: one thing less
// to get wrong, and the names the AWS tooling uses for the same two values.
const (
	EtcdSnapshotAccessKeyIDKey     = "accessKeyID"
	EtcdSnapshotSecretAccessKeyKey = "secretAccessKey"
)

// EtcdSnapshots configures scheduled snapshots of a control-plane node's etcd member to an
// S3-compatible object store, a snapshot before every in-place upgrade and on-demand snapshots.
// On a KairosControlPlane it is spec.etcd.snapshots, which the control plane copies into the
// KairosConfig of every control-plane Machine; only control-plane nodes take snapshots.
type EtcdSnapshots struct {
	// schedule is when snapshots are taken, as a cron expression of five fields (minute, hour,
	// day of month, month, day of week) made of *, numbers, ranges (1-5), lists (1,3) and steps
	// (*/6, 0-30/10), in the node's time zone. Day of month and day of week may not both be
	// restricted. Defaults to "0 */12 * * *" (00:00 and 12:00, as k3s).
	// +optional
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^ *[^ ]+( +[^ ]+){4} *$')",message="must be a cron expression of five fields (minute hour day-of-month month day-of-week), for example '0 */12 * * *'"
	Schedule string `json:"schedule,omitempty"`

	// retention is how many snapshots of each kind (scheduled, before an upgrade, on demand)
	// each member keeps, locally and in the store; older ones are deleted. Defaults to 5.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention *int32 `json:"retention,omitempty"`

	// s3 is the S3-compatible object store the snapshots are uploaded to.
	// +required
	S3 EtcdSnapshotS3 `json:"s3,omitzero"`

	// restore makes this control-plane node start the cluster again from a snapshot in the
	// store instead of from an empty etcd: with Newest, before the distribution first starts,
	// the node restores the newest snapshot of the cluster that restores, trying older ones when
	// one is corrupt or of another cluster, and does not start while none does (the reason is
	// in the journal of the distribution's unit). Only the node that creates the cluster
	// restores. A KairosControlPlane sets it itself on the replacement of its last Machine; it
	// is refused in its spec.etcd.snapshots.
	// +optional
	Restore EtcdSnapshotRestore `json:"restore,omitempty"`
}

// EtcdSnapshotRestore says which snapshot a node restores.
// +kubebuilder:validation:Enum=Newest
type EtcdSnapshotRestore string

// EtcdSnapshotRestoreNewest restores the newest snapshot of the cluster that restores.
const EtcdSnapshotRestoreNewest EtcdSnapshotRestore = "Newest"

// EtcdSnapshotS3 is an S3-compatible bucket, reached over HTTPS with path-style requests
// (https://<endpoint>/<bucket>/<key>) and AWS Signature Version 4.
type EtcdSnapshotS3 struct {
	// endpoint is the store's host[:port], without a scheme or a path, for example
	// s3.eu-west-1.amazonaws.com or minio.example.com:9000. Snapshots always go over HTTPS:
	// they hold every Secret of the cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="!self.contains('://')",message="endpoint is host[:port] without a scheme: snapshots always go over HTTPS (set caBundle for a private CA)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('/')",message="endpoint is host[:port] without a path: put the folder in prefix"
	Endpoint string `json:"endpoint"`

	// bucket is the name of an existing bucket.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')",message="must be an S3 bucket name: lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
	Bucket string `json:"bucket"`

	// prefix is the folder inside the bucket; snapshots go to
	// <prefix>/<namespace>/<cluster>/. Letters, digits, '.', '_', '-' and '/' between them.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$')",message="must be a folder path of letters, digits, '.', '_' and '-', separated by single '/', without a leading or trailing '/'"
	Prefix string `json:"prefix,omitempty"`

	// region of the bucket, which AWS Signature Version 4 signs with. Defaults to us-east-1,
	// which most S3-compatible stores accept.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9-]+$')",message="must be a region name of lowercase letters, digits and hyphens, for example eu-west-1"
	Region string `json:"region,omitempty"`

	// caBundle holds the PEM certificates of the CAs that the store's TLS certificate is
	// checked against, for stores with a private CA; empty uses the node's system roots. A CA
	// certificate is public, so it is inline, checked at admission.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
	CABundle string `json:"caBundle,omitempty"`

	// credentialsSecret names a Secret in the same namespace with the keys accessKeyID and
	// secretAccessKey. The credentials are never inline: they reach only the bootstrap data of
	// control-plane nodes.
	// +required
	CredentialsSecret S3CredentialsSecretReference `json:"credentialsSecret,omitzero"`
}

// S3CredentialsSecretReference names a Secret in the object's namespace that holds the keys
// accessKeyID and secretAccessKey.
type S3CredentialsSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Folder is where the snapshots of a cluster go in the bucket: <prefix>/<namespace>/<cluster>
// (docs/backups.md, "Naming": two clusters of one name in two namespaces may share a bucket).
func (s *EtcdSnapshotS3) Folder(namespace, cluster string) string {
	return strings.TrimPrefix(path.Join(s.Prefix, namespace, cluster), "/")
}

// Default fills the defaults of EtcdSnapshots.
func (s *EtcdSnapshots) Default() {
	if s.Schedule == "" {
		s.Schedule = DefaultEtcdSnapshotSchedule
	}
	if s.Retention == nil {
		r := DefaultEtcdSnapshotRetention
		s.Retention = &r
	}
	if s.S3.Region == "" {
		s.S3.Region = DefaultEtcdSnapshotS3Region
	}
}
