// Package userdata turns a KairosConfig spec plus what the cluster provides (endpoint, PKI,
// join token, referenced Secret contents) into the Kairos document a node receives. The
// bootstrap reconciler, the offline preview command and the admission dry render (package
// dryrun, which both providers' webhooks run) all go through it, so a preview shows exactly
// what the controller writes and admission refuses what rendering would refuse.
package userdata

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/merge"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// Ref identifies one key of a Secret in the KairosConfig's namespace.
type Ref struct{ Name, Key string }

func (r Ref) String() string { return r.Name + "/" + r.Key }

// RefOf returns the Ref of a Secret reference, applying the default key.
func RefOf(r *bootstrapv1.SecretKeyReference) Ref {
	key := r.Key
	if key == "" {
		key = bootstrapv1.DefaultSecretKey
	}
	return Ref{Name: r.Name, Key: key}
}

// Inputs is everything rendering needs besides the spec.
type Inputs struct {
	ClusterName string
	// Namespace is the Cluster's: etcd snapshots go to <prefix>/<namespace>/<cluster>/, so that
	// clusters of one name in two namespaces never share a folder.
	Namespace string
	Endpoint  render.Endpoint
	// Network is the Cluster's spec.clusterNetwork.
	Network           render.Network
	KubernetesVersion string
	// Init is true for the control-plane node that creates the cluster.
	Init bool
	// PKI is required by control-plane nodes.
	PKI *render.PKI
	// JoinToken is the k0s join token, or the k3s server token (servers) or agent token
	// (agents), the node uses.
	JoinToken string
	// AgentToken is the k3s agent token servers accept from agents (k3s servers only).
	AgentToken string
	// Secrets holds the content of every Ref that References returns.
	Secrets map[Ref]string
	// MachineName is the Machine the data is for; empty for a MachinePool, whose nodes share
	// the data. With providerID.source Machine it names the node (unless hostname is set),
	// which is how the controller finds the Node to give the Machine's provider ID.
	MachineName string
}

// References lists the Secret references of a spec, without duplicates, in spec order.
func References(spec *bootstrapv1.KairosConfigSpec) []Ref {
	var refs []Ref
	seen := map[Ref]bool{}
	add := func(r *bootstrapv1.SecretKeyReference) {
		if r == nil {
			return
		}
		ref := RefOf(r)
		if !seen[ref] {
			seen[ref] = true
			refs = append(refs, ref)
		}
	}
	add(spec.UserPasswordSecretRef)
	add(spec.WorkerTokenSecretRef)
	for i := range spec.Files {
		add(spec.Files[i].ContentFrom)
	}
	for i := range spec.Manifests {
		add(spec.Manifests[i].ContentFrom)
	}
	for i := range spec.CloudConfigFragments {
		add(spec.CloudConfigFragments[i].ContentFrom)
	}
	for _, r := range etcdSnapshotCredentials(spec) {
		add(&bootstrapv1.SecretKeyReference{Name: r.Name, Key: r.Key})
	}
	return refs
}

// etcdSnapshotCredentials are the two keys of the etcd snapshots' credentials Secret: the
// access key ID, then the secret access key. None without etcdSnapshots.
func etcdSnapshotCredentials(spec *bootstrapv1.KairosConfigSpec) []Ref {
	if spec.EtcdSnapshots == nil {
		return nil
	}
	name := spec.EtcdSnapshots.S3.CredentialsSecret.Name
	return []Ref{{Name: name, Key: bootstrapv1.EtcdSnapshotAccessKeyIDKey}, {Name: name, Key: bootstrapv1.EtcdSnapshotSecretAccessKeyKey}}
}

// etcdSnapshots maps a defaulted spec's etcdSnapshots onto the renderer's model, with the
// credentials read from their Secret.
func etcdSnapshots(spec *bootstrapv1.KairosConfigSpec, in Inputs) (*render.EtcdSnapshots, error) {
	e := spec.EtcdSnapshots
	if e == nil {
		return nil, nil
	}
	creds := etcdSnapshotCredentials(spec)
	values := make([]string, len(creds))
	for i, r := range creds {
		v, ok := in.Secrets[r]
		if !ok {
			return nil, fmt.Errorf("etcd snapshots: the content of Secret key %s was not provided", r)
		}
		// kubectl create secret --from-file keeps a file's trailing newline, which is not part
		// of the key.
		values[i] = strings.TrimRight(v, "\r\n")
	}
	var retention int32
	if e.Retention != nil {
		retention = *e.Retention
	}
	return &render.EtcdSnapshots{
		Schedule: e.Schedule, Retention: retention,
		Endpoint: e.S3.Endpoint, Bucket: e.S3.Bucket, Folder: e.S3.Folder(in.Namespace, in.ClusterName), Region: e.S3.Region,
		CABundle:    e.S3.CABundle,
		AccessKeyID: values[0], SecretAccessKey: values[1],
		Restore: e.Restore == bootstrapv1.EtcdSnapshotRestoreNewest,
	}, nil
}

// WorkerTokenOverride returns the join token the user supplied instead of a generated one.
func WorkerTokenOverride(spec *bootstrapv1.KairosConfigSpec, secrets map[Ref]string) (string, bool) {
	switch {
	// Tokens copied from a server's token file or `kubectl create secret --from-file` end in a
	// newline that is not part of the token.
	case spec.WorkerToken != "":
		return strings.TrimSpace(spec.WorkerToken), true
	case spec.WorkerTokenSecretRef != nil:
		return strings.TrimSpace(secrets[RefOf(spec.WorkerTokenSecretRef)]), true
	}
	return "", false
}

// Render returns the bootstrap data of a defaulted spec. Problems the renderer finds are
// returned as a *RenderError that names the spec (or Cluster) field of each.
//
// Render does not panic: a panic of the renderer on some input (a bug; the fuzz targets look
// for them) is returned as an error, so that the object gets a condition and an event and
// admission refuses it, instead of a reconcile that crashes again and again.
func Render(spec *bootstrapv1.KairosConfigSpec, in Inputs) (data []byte, err error) {
	defer recoverRender(&err)
	node, fragments, err := Node(spec, in)
	if err != nil {
		return nil, err
	}
	if data, err = render.Document(node, fragments...); err != nil {
		return nil, locate(spec, in, err)
	}
	return data, nil
}

// Node maps a defaulted spec and its inputs onto the renderer's model.
func Node(spec *bootstrapv1.KairosConfigSpec, in Inputs) (render.Node, []merge.Fragment, error) {
	content := func(inline string, from *bootstrapv1.SecretKeyReference) (string, error) {
		if from == nil {
			return inline, nil
		}
		v, ok := in.Secrets[RefOf(from)]
		if !ok {
			return "", fmt.Errorf("the content of Secret key %s was not provided", RefOf(from))
		}
		return v, nil
	}

	password, err := content(spec.UserPassword, spec.UserPasswordSecretRef)
	if err != nil {
		return render.Node{}, nil, err
	}
	// A password file written with echo ends in a newline that is not part of the password.
	password = strings.TrimSuffix(strings.TrimSuffix(password, "\n"), "\r")
	user := render.User{Name: spec.UserName, Password: password, Groups: spec.UserGroups}
	if spec.GithubUser != "" {
		user.SSHAuthorizedKeys = append(user.SSHAuthorizedKeys, "github:"+spec.GithubUser)
	}
	if key := strings.TrimSpace(spec.SSHPublicKey); key != "" {
		user.SSHAuthorizedKeys = append(user.SSHAuthorizedKeys, key)
	}

	hostname, err := nodeHostname(spec, in)
	if err != nil {
		return render.Node{}, nil, err
	}
	node := render.Node{
		Distribution:      render.Distribution(spec.Distribution),
		Role:              render.Role(spec.Role),
		Init:              in.Init,
		SingleNode:        spec.SingleNode,
		KubernetesVersion: in.KubernetesVersion,
		ClusterName:       in.ClusterName,
		Endpoint:          in.Endpoint,
		Network:           in.Network,
		VIP:               vip(spec.VirtualIP),
		AgentToken:        in.AgentToken,
		Hostname:          hostname,
		// The Node waits for the Machine's provider ID: k3s' embedded cloud controller would
		// claim it first with k3s://<node name>, and a Node's provider ID never changes.
		ExternalProviderID: providerIDFromMachine(spec, in),
		HostnamePrefix:     spec.HostnamePrefix,
		Image:              spec.Image,
		Users:              []render.User{user},
		PreCommands:        spec.PreCommands,
		PostCommands:       spec.PostCommands,
		PKI:                in.PKI,
		JoinToken:          in.JoinToken,
	}
	if spec.Install != nil {
		node.Install = &render.Install{
			Auto:   spec.Install.Auto == nil || *spec.Install.Auto,
			Device: spec.Install.Device,
			// Rebooting is the default (see the API's Install.Reboot).
			Reboot:   spec.Install.Reboot == nil && !spec.Install.Poweroff || spec.Install.Reboot != nil && *spec.Install.Reboot,
			Poweroff: spec.Install.Poweroff,
		}
	}
	for _, f := range spec.Files {
		c, err := content(f.Content, f.ContentFrom)
		if err != nil {
			return render.Node{}, nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
		var perm uint64
		if f.Permissions != "" {
			if perm, err = strconv.ParseUint(f.Permissions, 8, 32); err != nil {
				return render.Node{}, nil, fmt.Errorf("file %s: permissions %q are not octal", f.Path, f.Permissions)
			}
		}
		node.Files = append(node.Files, render.File{Path: f.Path, Content: c, Owner: f.Owner, Permissions: uint32(perm)})
	}
	for _, m := range spec.Manifests {
		c, err := content(m.Content, m.ContentFrom)
		if err != nil {
			return render.Node{}, nil, fmt.Errorf("manifest %s: %w", m.Name, err)
		}
		// The API names manifest files; the renderer adds the .yaml extension itself. The
		// admission validation (package validation) has refused names that are not manifest
		// file names.
		name, _ := syntax.ManifestFileName(m.Name)
		node.Manifests = append(node.Manifests, render.Manifest{Name: name, Content: c})
	}
	opts := spec.K0s
	if spec.Distribution == bootstrapv1.DistributionK3s {
		opts = spec.K3s
	}
	if opts != nil {
		node.Args, node.Env, node.Config = opts.Args, opts.Env, opts.Config
	}

	if node.EtcdSnapshots, err = etcdSnapshots(spec, in); err != nil {
		return render.Node{}, nil, err
	}

	fragments := make([]merge.Fragment, 0, len(spec.CloudConfigFragments))
	for _, f := range spec.CloudConfigFragments {
		c, err := content(f.Content, f.ContentFrom)
		if err != nil {
			return render.Node{}, nil, fmt.Errorf("cloud-config fragment %s: %w", f.Name, err)
		}
		fragments = append(fragments, merge.Fragment{Name: f.Name, Position: merge.Position(f.Position), Content: []byte(c)})
	}
	return node, fragments, nil
}

// providerIDFromMachine tells whether the controller gives the Node its Machine's provider ID.
// MachinePool nodes share one document and have no Machine of their own to take it from.
func providerIDFromMachine(spec *bootstrapv1.KairosConfigSpec, in Inputs) bool {
	return spec.ProviderID.Source == bootstrapv1.ProviderIDFromMachine && in.MachineName != ""
}

// NodeName is the name the node registers its Node under when the controller gives it the
// Machine's provider ID: the spec's hostname, else the Machine's name. Empty when it cannot
// be known (hostnamePrefix, MachinePools, provider IDs from the distribution).
func NodeName(spec *bootstrapv1.KairosConfigSpec, machineName string) string {
	if spec.ProviderID.Source != bootstrapv1.ProviderIDFromMachine || machineName == "" || spec.HostnamePrefix != "" {
		return ""
	}
	if spec.Hostname != "" {
		return spec.Hostname
	}
	return machineName
}

// nodeHostname is the hostname the document sets: the spec's, or the Machine's name when the
// controller must find the Node by it.
func nodeHostname(spec *bootstrapv1.KairosConfigSpec, in Inputs) (string, error) {
	if spec.Hostname != "" || spec.HostnamePrefix != "" || !providerIDFromMachine(spec, in) {
		return spec.Hostname, nil
	}
	if msgs := validation.IsDNS1123Label(in.MachineName); len(msgs) > 0 {
		return "", fmt.Errorf("the node would be named after its Machine %q, which is not a valid hostname (%s): set spec.hostname, or shorten the Machine's name",
			in.MachineName, strings.Join(msgs, "; "))
	}
	return in.MachineName, nil
}

func vip(v *bootstrapv1.VirtualIP) *render.VIP {
	if v == nil {
		return nil
	}
	return &render.VIP{
		Address: v.Address, PrefixLength: v.PrefixLength, Interface: v.Interface,
		VirtualRouterID: v.VirtualRouterID, KubeVIPImage: v.KubeVIPImage,
	}
}

// recoverRender turns a panic of the renderer into *err. The panic value names the fault, not
// the input, so no secret material reaches conditions or events through it.
func recoverRender(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("internal error of the Kairos renderer on this spec (a bug: please report it with the spec, without its secrets): %v", r)
	}
}
