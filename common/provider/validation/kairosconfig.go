// Package validation is the Go validation of a KairosConfigSpec, which the admission webhooks
// of both providers run: the bootstrap provider's for KairosConfigs and KairosConfigTemplates,
// the control-plane provider's for the kairosConfigSpec a KairosControlPlane embeds. It lives
// here, beside the dry render (package dryrun), rather than in the bootstrap API package: its
// rules share the renderer's grammar (common/syntax), and an API package that imported it would
// make every consumer of the API types require the renderer and yip. The API packages keep
// types, defaults and CEL rules.
//
// The rules the CRDs also hold as CEL rules are checked here again, in the CEL rules' words
// (the msg* and fmt* constants below, which TestMessagesAreTheCRDs compares with the generated
// CRDs): the API server never calls the webhooks for an object its CEL rules refuse, but the
// checks here run where no API server does (the offline preview, the release checks of the
// shipped templates) and on a control plane's embedded spec with the role and distribution the
// control plane gives it.
package validation

import (
	"encoding/base64"
	"fmt"
	"path"
	"regexp"
	"strings"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// The grammar of Kubernetes versions and of user, group, environment variable and manifest
// names is the renderer's too: one copy in the common module's syntax package, so that a spec
// admission accepts is never refused by the renderer for its spelling.
var (
	githubUserPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`)
	permissionPattern = regexp.MustCompile(`^0?[0-7]{3}$`)
	// k3sTokenPattern is k3s' secure token format, which pins the server CA.
	k3sTokenPattern = regexp.MustCompile(`^K10[0-9a-f]{64}::[^:\s]+:\S+$`)
	sshKeyTypes     = []string{"ssh-rsa", "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com"}
)

// The messages of the rules the CRDs also hold as CEL rules, in the CEL rules' words (the CRD
// markers cannot name Go constants: TestMessagesAreTheCRDs compares these with the generated
// CRDs, so that a rule worded differently in one place fails a test instead of confusing users).
// fmt* take the distribution, as the CEL rules' messageExpression does.
const (
	msgPasswordTwice             = "userPassword and userPasswordSecretRef are mutually exclusive: keep only userPasswordSecretRef"
	msgWorkerTokenTwice          = "workerToken and workerTokenSecretRef are mutually exclusive: keep only workerTokenSecretRef"
	msgHostnameAndPrefix         = "hostname and hostnamePrefix are mutually exclusive: a template shared by many Machines should use hostnamePrefix only"
	msgContentTwice              = "content and contentFrom are mutually exclusive: keep one"
	msgContentMissing            = "set content, or contentFrom to read it from a Secret"
	msgRebootAndPoweroff         = "reboot and poweroff are mutually exclusive: keep reboot to boot into the installed system"
	msgStaysInInstaller          = "the machine would stay in the live installer, where the node never bootstraps: remove reboot: false (it defaults to true), or set poweroff if the infrastructure boots the machine again"
	msgSingleNodeWorker          = "only control-plane nodes can be single-node: remove singleNode or set role: control-plane"
	msgWorkerTokenOnControlPlane = "only workers use a worker token: remove it (control-plane credentials are generated)"
	msgManifestsOnWorker         = "manifests are applied by the control plane: move them to the control-plane KairosConfig (or KairosControlPlane)"
	msgK0sConfigOnWorker         = "the k0s ClusterConfig is read by controllers only: remove it from worker configs"
	fmtK0sOptionsElsewhere       = "k0s options do not apply to distribution %s: move them to spec.k3s or set distribution: k0s"
	fmtK3sOptionsElsewhere       = "k3s options do not apply to distribution %s: move them to spec.k0s or set distribution: k3s"
)

// redacted stands in for secret values in error messages.
const redacted = "<redacted>"

// What a node does with the content (cloud-config fragments, manifests, distribution
// arguments and configuration, from inline fields or Secrets) is checked by the renderer in
// the common module, the only copy of those rules: admission runs it through the bootstrap
// provider's dry render, and the controller again with the Secrets' content.

// ValidateKairosConfigSpec checks a defaulted KairosConfigSpec. Every error names the field and
// says how to fix it. fld is the spec's field path (spec, or spec.template.spec for templates).
func ValidateKairosConfigSpec(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList

	switch s.Role {
	case bootstrapv1.RoleControlPlane, bootstrapv1.RoleWorker:
	default:
		errs = append(errs, field.NotSupported(fld.Child("role"), s.Role, []bootstrapv1.Role{bootstrapv1.RoleControlPlane, bootstrapv1.RoleWorker}))
	}
	switch s.Distribution {
	case bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s:
	default:
		errs = append(errs, field.NotSupported(fld.Child("distribution"), s.Distribution, []bootstrapv1.Distribution{bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s}))
	}
	if s.KubernetesVersion != "" {
		if _, err := syntax.ParseKubernetesVersion(s.KubernetesVersion); err != nil {
			errs = append(errs, field.Invalid(fld.Child("kubernetesVersion"), s.KubernetesVersion,
				"must be a semantic version with a leading v, for example v1.31.2"))
		}
	}
	if s.SingleNode && s.Role != bootstrapv1.RoleControlPlane {
		errs = append(errs, field.Forbidden(fld.Child("singleNode"),
			msgSingleNodeWorker))
	}

	errs = append(errs, validateImage(s, fld)...)
	errs = append(errs, validateUser(s, fld)...)
	errs = append(errs, validateWorkerToken(s, fld)...)
	errs = append(errs, validateManifests(s, fld.Child("manifests"))...)
	errs = append(errs, validateFiles(s, fld.Child("files"))...)
	errs = append(errs, validateHostname(s, fld)...)
	errs = append(errs, validateInstall(s, fld.Child("install"))...)
	errs = append(errs, validateDistributionOptions(s, fld)...)
	errs = append(errs, validateFragments(s, fld.Child("cloudConfigFragments"))...)
	if s.EtcdSnapshots != nil && s.Role != bootstrapv1.RoleControlPlane {
		errs = append(errs, field.Forbidden(fld.Child("etcdSnapshots"), msgEtcdSnapshotsOnWorker))
	}
	errs = append(errs, ValidateEtcdSnapshots(s.EtcdSnapshots, fld.Child("etcdSnapshots"))...)
	return errs
}

// KairosConfigSpecWarnings returns the admission warnings of a defaulted spec.
func KairosConfigSpecWarnings(s *bootstrapv1.KairosConfigSpec, fld *field.Path) []string {
	var warnings []string
	if s.UsesDefaultPassword() {
		warnings = append(warnings, fmt.Sprintf("%s: the login user %q has the well-known development password %q; "+
			"set %s or %s, or authorize keys with %s or %s",
			fld.Child("userPassword"), s.UserName, bootstrapv1.DefaultUserPassword, fld.Child("userPassword"),
			fld.Child("userPasswordSecretRef"), fld.Child("githubUser"), fld.Child("sshPublicKey")))
	}
	if s.WorkerToken != "" {
		warnings = append(warnings, fmt.Sprintf("%s is stored in plain text in the object; prefer %s",
			fld.Child("workerToken"), fld.Child("workerTokenSecretRef")))
	}
	if s.VirtualIP != nil && s.VirtualIP.VirtualRouterID != 0 && s.Distribution == bootstrapv1.DistributionK3s {
		warnings = append(warnings, fmt.Sprintf("%s has no effect with k3s: kube-vip elects the holder of the virtual IP with a Kubernetes lease, not VRRP",
			fld.Child("virtualIP", "virtualRouterID")))
	}
	if s.Image != "" && syntax.IsImageReference(s.Image) {
		if _, ok := syntax.ParseKairosImage(s.Image); !ok {
			warnings = append(warnings, fmt.Sprintf("%s %q names no Kairos distribution version (a standard Kairos image ends its tag with -<kairos version>-%sv<kubernetes version>-<build>), "+
				"so its distribution and version cannot be checked here: a node that booted another image upgrades to it once before %s starts, and starts %s only if the version it ships matches the requested one",
				fld.Child("image"), s.Image, s.Distribution, s.Distribution, s.Distribution))
		}
	}
	return warnings
}

// validateImage checks spec.image: an image reference and, when its tag names the distribution
// and Kubernetes version the way Kairos names standard images, the spec's distribution and
// kubernetesVersion. A node refuses to start a distribution of another version (the preflight),
// so an image that disagrees would leave every Machine of the spec without a Node.
func validateImage(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	if s.Image == "" {
		return nil
	}
	p := fld.Child("image")
	if !syntax.IsImageReference(s.Image) {
		return field.ErrorList{field.Invalid(p, s.Image,
			"must be an OCI image reference such as quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.36.3-k3s1 (lower-case repository, a tag and/or a digest)")}
	}
	img, ok := syntax.ParseKairosImage(s.Image)
	if !ok {
		return nil // KairosConfigSpecWarnings says it cannot be checked
	}
	var errs field.ErrorList
	if string(s.Distribution) != "" && img.Distribution != string(s.Distribution) {
		errs = append(errs, field.Invalid(p, s.Image, fmt.Sprintf(
			"ships %s %s, but the distribution is %s: the node could not start %s; use a %s image (its tag ends with -%sv<version>-<build>)",
			img.Distribution, img.SoftwareVersion(), s.Distribution, s.Distribution, s.Distribution, s.Distribution)))
		return errs
	}
	return append(errs, ValidateImageVersion(s.Image, s.KubernetesVersion, p, fld.Child("kubernetesVersion"))...)
}

// ValidateImageVersion checks that an image whose tag names its distribution version ships the
// version a spec asks for (versionFld: spec.kubernetesVersion of a KairosConfig, spec.version of a
// KairosControlPlane). An empty version, or an image whose tag names none, is not checked.
func ValidateImageVersion(image, version string, fld, versionFld *field.Path) field.ErrorList {
	img, ok := syntax.ParseKairosImage(image)
	if !ok || version == "" {
		return nil
	}
	if syntax.ImageShipsVersion(img.SoftwareVersion(), version) {
		return nil
	}
	return field.ErrorList{field.Invalid(fld, image, fmt.Sprintf(
		"ships %s %s, but %s is %s: the node's preflight would refuse to start %s; use the image of %s, or change %s to %s",
		img.Distribution, img.SoftwareVersion(), versionFld, version, img.Distribution, version, versionFld, img.KubernetesVersion))}
}

func validateUser(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !syntax.IsLinuxName(s.UserName) {
		errs = append(errs, field.Invalid(fld.Child("userName"), s.UserName,
			"must be a Linux user name: lower case letters, digits, _ or -, starting with a letter or _, at most 32 characters"))
	}
	if s.UserPassword != "" && s.UserPasswordSecretRef != nil {
		errs = append(errs, field.Forbidden(fld.Child("userPassword"),
			msgPasswordTwice))
	}
	errs = append(errs, validateSecretRef(fld.Child("userPasswordSecretRef"), s.UserPasswordSecretRef)...)
	for i, g := range s.UserGroups {
		if !syntax.IsLinuxName(g) {
			errs = append(errs, field.Invalid(fld.Child("userGroups").Index(i), g,
				"must be a Linux group name: lower case letters, digits, _ or -, starting with a letter or _"))
		}
	}
	if s.GithubUser != "" && !githubUserPattern.MatchString(s.GithubUser) {
		errs = append(errs, field.Invalid(fld.Child("githubUser"), s.GithubUser,
			"must be a GitHub user name (letters, digits and single hyphens, at most 39 characters), without the github: prefix"))
	}
	if s.SSHPublicKey != "" {
		if msg := checkAuthorizedKey(s.SSHPublicKey); msg != "" {
			errs = append(errs, field.Invalid(fld.Child("sshPublicKey"), truncate(s.SSHPublicKey), msg))
		}
	}
	return errs
}

func validateWorkerToken(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.WorkerToken != "" && s.WorkerTokenSecretRef != nil {
		errs = append(errs, field.Forbidden(fld.Child("workerToken"),
			msgWorkerTokenTwice))
	}
	if s.Role == bootstrapv1.RoleControlPlane {
		if s.WorkerToken != "" {
			errs = append(errs, field.Forbidden(fld.Child("workerToken"),
				msgWorkerTokenOnControlPlane))
		}
		if s.WorkerTokenSecretRef != nil {
			errs = append(errs, field.Forbidden(fld.Child("workerTokenSecretRef"),
				msgWorkerTokenOnControlPlane))
		}
	}
	if s.WorkerToken != "" && s.Distribution == bootstrapv1.DistributionK0s && !looksLikeK0sJoinToken(s.WorkerToken) {
		errs = append(errs, field.Invalid(fld.Child("workerToken"), redacted,
			"is not a k0s join token (base64 of a gzip-compressed kubeconfig): create one with `k0s token create --role=worker`, or leave it empty to let the provider generate one"))
	}
	if s.WorkerToken != "" && s.Distribution == bootstrapv1.DistributionK3s && !k3sTokenPattern.MatchString(strings.TrimSpace(s.WorkerToken)) {
		errs = append(errs, field.Invalid(fld.Child("workerToken"), redacted,
			"is not a k3s secure agent token (K10<sha256 of the server CA>::node:<password>, as in /var/lib/rancher/k3s/server/agent-token), which lets the node verify the server: copy it from a server, or leave it empty to use the cluster's agent token"))
	}
	errs = append(errs, validateSecretRef(fld.Child("workerTokenSecretRef"), s.WorkerTokenSecretRef)...)
	return errs
}

func validateManifests(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Manifests) > 0 && s.Role != bootstrapv1.RoleControlPlane {
		errs = append(errs, field.Forbidden(fld,
			msgManifestsOnWorker))
	}
	seen := map[string]bool{}
	for i, m := range s.Manifests {
		p := fld.Index(i)
		if _, ok := syntax.ManifestFileName(m.Name); !ok {
			errs = append(errs, field.Invalid(p.Child("name"), m.Name,
				"must be a lower-case file name ending in .yaml or .yml, without directories, for example cni.yaml"))
		}
		if seen[m.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), m.Name))
		}
		seen[m.Name] = true
		errs = append(errs, validateContent(p, m.Content, m.ContentFrom)...)
	}
	return errs
}

func validateFiles(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, f := range s.Files {
		p := fld.Index(i)
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.HasSuffix(f.Path, "/") {
			errs = append(errs, field.Invalid(p.Child("path"), f.Path,
				"must be an absolute, clean file path such as /etc/myapp/config.yaml"))
		}
		if seen[f.Path] {
			errs = append(errs, field.Duplicate(p.Child("path"), f.Path))
		}
		seen[f.Path] = true
		switch {
		case f.Owner == "" || syntax.IsFileOwner(f.Owner):
		case syntax.IsFileOwnerIDBeyondMax(f.Owner):
			errs = append(errs, field.Invalid(p.Child("owner"), f.Owner,
				fmt.Sprintf("a numeric id is at most %d: the kernel keeps only 32 bits of an id (4294967296 would be root) and %d means \"leave unchanged\"", syntax.MaxID, uint64(syntax.MaxID)+1)))
		default:
			errs = append(errs, field.Invalid(p.Child("owner"), f.Owner,
				`must be "user:group", for example root:root or 1000:1000 (both names or both numeric ids)`))
		}
		if f.Permissions != "" && !permissionPattern.MatchString(f.Permissions) {
			errs = append(errs, field.Invalid(p.Child("permissions"), f.Permissions,
				`must be octal file permissions such as "0644" or "0600"`))
		}
		errs = append(errs, validateContent(p, f.Content, f.ContentFrom)...)
	}
	return errs
}

func validateHostname(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Hostname != "" && s.HostnamePrefix != "" {
		errs = append(errs, field.Forbidden(fld.Child("hostnamePrefix"),
			msgHostnameAndPrefix))
	}
	if s.Hostname != "" {
		for _, msg := range k8svalidation.IsDNS1123Label(s.Hostname) {
			errs = append(errs, field.Invalid(fld.Child("hostname"), s.Hostname, msg))
		}
	}
	if s.HostnamePrefix != "" && s.ProviderID.Source == bootstrapv1.ProviderIDFromMachine {
		errs = append(errs, field.Forbidden(fld.Child("hostnamePrefix"),
			"with providerID.source Machine (the default) each node is named after its Machine, so that the controller can give its Node the Machine's provider ID; a prefix with a machine-id suffix makes names it cannot predict: remove hostnamePrefix, or set providerID.source to Distribution"))
	}
	if s.HostnamePrefix != "" {
		// The prefix is followed by a suffix, so it may end with a hyphen.
		for _, msg := range k8svalidation.IsDNS1123Label(strings.TrimSuffix(s.HostnamePrefix, "-") + "x") {
			errs = append(errs, field.Invalid(fld.Child("hostnamePrefix"), s.HostnamePrefix, msg))
		}
	}
	return errs
}

func validateInstall(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	if s.Install == nil {
		return nil
	}
	var errs field.ErrorList
	// An unset reboot defaults to true unless poweroff is set (see Default).
	reboot := s.Install.Reboot != nil && *s.Install.Reboot
	noReboot := s.Install.Reboot != nil && !*s.Install.Reboot
	switch {
	case reboot && s.Install.Poweroff:
		errs = append(errs, field.Forbidden(fld.Child("poweroff"),
			msgRebootAndPoweroff))
	case noReboot && !s.Install.Poweroff && (s.Install.Auto == nil || *s.Install.Auto):
		errs = append(errs, field.Invalid(fld.Child("reboot"), false,
			msgStaysInInstaller))
	}
	if d := s.Install.Device; d != "" && d != "auto" && (!strings.HasPrefix(d, "/dev/") || path.Clean(d) != d) {
		errs = append(errs, field.Invalid(fld.Child("device"), d,
			"must be auto or a device path such as /dev/sda or /dev/disk/by-id/..."))
	}
	return errs
}

func validateDistributionOptions(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.K0s != nil && s.Distribution != bootstrapv1.DistributionK0s {
		errs = append(errs, field.Forbidden(fld.Child("k0s"),
			fmt.Sprintf(fmtK0sOptionsElsewhere, s.Distribution)))
	}
	if s.K3s != nil && s.Distribution != bootstrapv1.DistributionK3s {
		errs = append(errs, field.Forbidden(fld.Child("k3s"),
			fmt.Sprintf(fmtK3sOptionsElsewhere, s.Distribution)))
	}
	for _, o := range []struct {
		name string
		opts *bootstrapv1.DistributionOptions
		dist bootstrapv1.Distribution
	}{{"k0s", s.K0s, bootstrapv1.DistributionK0s}, {"k3s", s.K3s, bootstrapv1.DistributionK3s}} {
		if o.opts == nil {
			continue
		}
		p := fld.Child(o.name)
		for name := range o.opts.Env {
			if !syntax.IsEnvName(name) {
				errs = append(errs, field.Invalid(p.Child("env").Key(name), name,
					"must be an environment variable name: letters, digits and _, not starting with a digit"))
			}
		}
		if o.opts.Config != "" {
			cp := p.Child("config")
			if o.dist == bootstrapv1.DistributionK0s && s.Role != bootstrapv1.RoleControlPlane {
				errs = append(errs, field.Forbidden(cp,
					msgK0sConfigOnWorker))
			}
		}
	}
	return errs
}

func validateFragments(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, f := range s.CloudConfigFragments {
		p := fld.Index(i)
		if seen[f.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), f.Name))
		}
		seen[f.Name] = true
		switch f.Position {
		case bootstrapv1.FragmentAppend, bootstrapv1.FragmentPrepend:
		default:
			errs = append(errs, field.NotSupported(p.Child("position"), f.Position, []bootstrapv1.FragmentPosition{bootstrapv1.FragmentAppend, bootstrapv1.FragmentPrepend}))
		}
		errs = append(errs, validateContent(p, f.Content, f.ContentFrom)...)
	}
	return errs
}

// ValidateSharedKairosConfigSpec adds the rules of specs that many Machines share
// (KairosConfigTemplates, and the KairosConfig spec a control plane stamps onto each of its
// Machines): a literal hostname would give every one of them the same name.
func ValidateSharedKairosConfigSpec(s *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Hostname != "" {
		errs = append(errs, field.Forbidden(fld.Child("hostname"), fmt.Sprintf(
			"every Machine created from this template would be named %q: leave it empty so that each node is named after its Machine (or use hostnamePrefix, with providerID.source Distribution)", s.Hostname)))
	}
	for i, f := range s.CloudConfigFragments {
		m := map[string]any{}
		if f.Content == "" || yaml.Unmarshal([]byte(f.Content), &m) != nil {
			continue // the dry render reports fragments it cannot read
		}
		if h, ok := m["hostname"].(string); ok && !strings.Contains(h, "{{") {
			errs = append(errs, field.Forbidden(fld.Child("cloudConfigFragments").Index(i).Child("content"), fmt.Sprintf(
				"fragment %q sets the literal hostname %q, which every Machine created from this template would share: remove it, so that each node is named after its Machine (or use hostnamePrefix, with providerID.source Distribution)", f.Name, h)))
		}
	}
	return errs
}

func validateContent(fld *field.Path, content string, from *bootstrapv1.SecretKeyReference) field.ErrorList {
	var errs field.ErrorList
	switch {
	case content != "" && from != nil:
		errs = append(errs, field.Forbidden(fld.Child("contentFrom"), msgContentTwice))
	case content == "" && from == nil:
		errs = append(errs, field.Required(fld.Child("content"), msgContentMissing))
	}
	return append(errs, validateSecretRef(fld.Child("contentFrom"), from)...)
}

func validateSecretRef(fld *field.Path, ref *bootstrapv1.SecretKeyReference) field.ErrorList {
	if ref == nil {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range k8svalidation.IsDNS1123Subdomain(ref.Name) {
		errs = append(errs, field.Invalid(fld.Child("name"), ref.Name, "must be the name of a Secret in this namespace: "+msg))
	}
	if ref.Key != "" {
		for _, msg := range k8svalidation.IsConfigMapKey(ref.Key) {
			errs = append(errs, field.Invalid(fld.Child("key"), ref.Key, "must be a key of the Secret's data: "+msg))
		}
	}
	return errs
}

func checkAuthorizedKey(key string) string {
	fields := strings.Fields(key)
	if len(fields) < 2 {
		return "must be one SSH public key in authorized_keys format, for example \"ssh-ed25519 AAAA... user@host\""
	}
	known := false
	for _, t := range sshKeyTypes {
		known = known || fields[0] == t
	}
	if !known {
		return fmt.Sprintf("unsupported key type %q: use one of %s", fields[0], strings.Join(sshKeyTypes, ", "))
	}
	if _, err := base64.StdEncoding.DecodeString(fields[1]); err != nil {
		return "the key material is not valid base64: paste the whole line of the .pub file"
	}
	if strings.Contains(key, "\n") && len(strings.Split(strings.TrimSpace(key), "\n")) > 1 {
		return "holds more than one key: use githubUser, or one key here"
	}
	return ""
}

// looksLikeK0sJoinToken checks the outer encoding of a k0s join token (base64 of gzip data)
// without decoding the credentials it contains.
func looksLikeK0sJoinToken(token string) bool {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(token))
	return err == nil && len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// The messages of the CEL rules of EtcdSnapshots (bootstrap/api/v1beta2/etcdsnapshots_types.go).
const (
	msgEtcdSnapshotsOnWorker = "only control-plane nodes run etcd: remove etcdSnapshots from worker configs"
	msgCronFields            = "must be a cron expression of five fields (minute hour day-of-month month day-of-week), for example '0 */12 * * *'"
	msgEndpointScheme        = "endpoint is host[:port] without a scheme: snapshots always go over HTTPS (set caBundle for a private CA)"
	msgEndpointPath          = "endpoint is host[:port] without a path: put the folder in prefix"
	msgBucketName            = "must be an S3 bucket name: lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
	msgPrefix                = "must be a folder path of letters, digits, '.', '_' and '-', separated by single '/', without a leading or trailing '/'"
	msgRegion                = "must be a region name of lowercase letters, digits and hyphens, for example eu-west-1"
	msgCABundlePEM           = "must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
)

var (
	cronFieldsPattern = regexp.MustCompile(`^ *[^ ]+( +[^ ]+){4} *$`)
	bucketPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	prefixPattern     = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	regionPattern     = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// ValidateEtcdSnapshots checks a defaulted EtcdSnapshots: the rules the CRD holds as CEL, in
// their words, and the cron grammar, which CEL cannot parse (syntax.ParseCron: the expressions
// both k3s and the k0s systemd timer read alike). What only the renderer knows (host[:port],
// the PEM certificates) reaches admission through the dry render. fld is the EtcdSnapshots
// field (spec.etcdSnapshots, or spec.etcd.snapshots of a KairosControlPlane).
func ValidateEtcdSnapshots(s *bootstrapv1.EtcdSnapshots, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s == nil {
		return nil
	}
	if !cronFieldsPattern.MatchString(s.Schedule) {
		errs = append(errs, field.Invalid(fld.Child("schedule"), s.Schedule, msgCronFields))
	} else if _, err := syntax.ParseCron(s.Schedule); err != nil {
		errs = append(errs, field.Invalid(fld.Child("schedule"), s.Schedule, err.Error()))
	}
	s3 := fld.Child("s3")
	if strings.Contains(s.S3.Endpoint, "://") {
		errs = append(errs, field.Invalid(s3.Child("endpoint"), s.S3.Endpoint, msgEndpointScheme))
	} else if strings.Contains(s.S3.Endpoint, "/") {
		errs = append(errs, field.Invalid(s3.Child("endpoint"), s.S3.Endpoint, msgEndpointPath))
	}
	if !bucketPattern.MatchString(s.S3.Bucket) {
		errs = append(errs, field.Invalid(s3.Child("bucket"), s.S3.Bucket, msgBucketName))
	}
	if s.S3.Prefix != "" && !prefixPattern.MatchString(s.S3.Prefix) {
		errs = append(errs, field.Invalid(s3.Child("prefix"), s.S3.Prefix, msgPrefix))
	}
	if s.S3.Region != "" && !regionPattern.MatchString(s.S3.Region) {
		errs = append(errs, field.Invalid(s3.Child("region"), s.S3.Region, msgRegion))
	}
	if s.S3.CABundle != "" && !strings.Contains(s.S3.CABundle, "-----BEGIN CERTIFICATE-----") {
		errs = append(errs, field.Invalid(s3.Child("caBundle"), "<PEM>", msgCABundlePEM))
	}
	if s.S3.CredentialsSecret.Name == "" {
		errs = append(errs, field.Required(s3.Child("credentialsSecret", "name"),
			"name a Secret in the same namespace with the keys "+bootstrapv1.EtcdSnapshotAccessKeyIDKey+" and "+bootstrapv1.EtcdSnapshotSecretAccessKeyKey))
	}
	return errs
}
