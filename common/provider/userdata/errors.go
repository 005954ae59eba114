package userdata

import (
	"fmt"
	"strconv"
	"strings"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// Problem is one reason the bootstrap data cannot be rendered, located where the user can fix
// it.
type Problem struct {
	// Field is the path of a KairosConfig spec field relative to the spec
	// ("k0s.args[2]", "cloudConfigFragments[1].contentFrom") when Spec is true; otherwise it
	// names a field of the Cluster or the owning Machine ("Cluster spec.clusterNetwork.pods.cidrBlocks[0]"),
	// or what the provider generated ("the generated join token").
	Field string
	Spec  bool
	// Source says where content read from a Secret came from, and names fragments:
	// `fragment "net", Secret net-config key value`.
	Source string
	// Path is the key path inside YAML content ("stages.boot[0].files[1].permissions").
	Path    string
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Spec {
		b.WriteString("spec.")
	}
	b.WriteString(p.Field)
	if p.Source != "" {
		b.WriteString(" (" + p.Source + ")")
	}
	if p.Path != "" {
		b.WriteString(": " + p.Path)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// RenderError lists why a spec cannot be rendered.
type RenderError struct {
	Problems []Problem
}

func (e *RenderError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// locate turns the renderer's field errors into Problems on the spec and the Cluster.
func locate(spec *bootstrapv1.KairosConfigSpec, in Inputs, err error) error {
	fes := render.FieldErrors(err)
	if len(fes) == 0 {
		return err
	}
	out := &RenderError{}
	for _, fe := range fes {
		p := locateField(spec, in, fe.Field)
		p.Path, p.Message = fe.Path, fe.Err.Error()
		out.Problems = append(out.Problems, p)
	}
	return out
}

// locateField maps a render.Node field ("Files[2].Content", "Args[0]", "Network.PodCIDRs[1]")
// to where its value came from; userdata.Node builds the Node from the spec in spec order, so
// indexes carry over.
func locateField(spec *bootstrapv1.KairosConfigSpec, in Inputs, field string) Problem {
	head, rest := splitField(field)
	idx, sub := index(rest)
	dist := string(spec.Distribution)
	inSpec := func(f string) Problem { return Problem{Field: f, Spec: true} }
	content := func(list string, i int, from *bootstrapv1.SecretKeyReference, name string) Problem {
		p := inSpec(fmt.Sprintf("%s[%d].content", list, i))
		if from != nil {
			p.Field = fmt.Sprintf("%s[%d].contentFrom", list, i)
			p.Source = "Secret " + RefOf(from).Name + " key " + RefOf(from).Key
		}
		if name != "" {
			if p.Source != "" {
				p.Source = name + ", " + p.Source
			} else {
				p.Source = name
			}
		}
		return p
	}
	switch head {
	case "Args":
		return inSpec(dist + ".args" + rest)
	case "Env":
		if k := strings.TrimPrefix(rest, "."); k != "" {
			return inSpec(dist + ".env[" + k + "]")
		}
		return inSpec(dist + ".env")
	case "Config":
		return inSpec(dist + ".config")
	case "Files":
		if idx >= 0 && idx < len(spec.Files) {
			if sub == ".Content" {
				return content("files", idx, spec.Files[idx].ContentFrom, "")
			}
			return inSpec(fmt.Sprintf("files[%d]%s", idx, lowerFirst(sub)))
		}
	case "Manifests":
		if idx >= 0 && idx < len(spec.Manifests) {
			if sub == ".Content" {
				return content("manifests", idx, spec.Manifests[idx].ContentFrom, "")
			}
			return inSpec(fmt.Sprintf("manifests[%d]%s", idx, lowerFirst(sub)))
		}
	case "Fragments":
		if idx >= 0 && idx < len(spec.CloudConfigFragments) {
			f := spec.CloudConfigFragments[idx]
			return content("cloudConfigFragments", idx, f.ContentFrom, fmt.Sprintf("fragment %q", f.Name))
		}
	case "Users":
		switch {
		case strings.HasPrefix(sub, ".Name"):
			return inSpec("userName")
		case strings.HasPrefix(sub, ".Password"):
			if spec.UserPasswordSecretRef != nil {
				return Problem{Field: "userPasswordSecretRef", Spec: true, Source: "Secret " + RefOf(spec.UserPasswordSecretRef).Name}
			}
			return inSpec("userPassword")
		case strings.HasPrefix(sub, ".Groups"):
			return inSpec("userGroups" + strings.TrimPrefix(sub, ".Groups"))
		case strings.HasPrefix(sub, ".SSHAuthorizedKeys"):
			return inSpec("sshPublicKey")
		}
		return inSpec("userName")
	case "EtcdSnapshots":
		switch rest {
		case ".Schedule", ".Retention":
			return inSpec("etcdSnapshots" + lowerFirst(rest))
		case ".Folder":
			return inSpec("etcdSnapshots.s3.prefix")
		case ".Endpoint", ".Bucket", ".Region":
			return inSpec("etcdSnapshots.s3" + lowerFirst(rest))
		case ".CABundle":
			return inSpec("etcdSnapshots.s3.caBundle")
		case "":
			if spec.EtcdSnapshots != nil {
				// The credentials: name the Secret, never its values.
				return Problem{Field: "etcdSnapshots.s3.credentialsSecret", Spec: true, Source: "Secret " + spec.EtcdSnapshots.S3.CredentialsSecret.Name}
			}
		}
		return inSpec("etcdSnapshots")
	case "Image":
		return inSpec("image")
	case "Hostname":
		return inSpec("hostname")
	case "HostnamePrefix":
		return inSpec("hostnamePrefix")
	case "Install":
		return inSpec("install" + lowerFirst(rest))
	case "PreCommands":
		return inSpec("preCommands" + rest)
	case "PostCommands":
		return inSpec("postCommands" + rest)
	case "SingleNode":
		return inSpec("singleNode")
	case "VIP":
		return inSpec("virtualIP" + lowerFirst(rest))
	case "Role":
		return inSpec("role")
	case "Distribution":
		return inSpec("distribution")
	case "KubernetesVersion":
		if spec.KubernetesVersion != "" {
			return inSpec("kubernetesVersion")
		}
		return Problem{Field: "the owning Machine's spec.version"}
	case "JoinToken":
		switch {
		case spec.WorkerToken != "":
			return inSpec("workerToken")
		case spec.WorkerTokenSecretRef != nil:
			return Problem{Field: "workerTokenSecretRef", Spec: true, Source: "Secret " + RefOf(spec.WorkerTokenSecretRef).Name}
		}
		return Problem{Field: "the generated join token"}
	case "Endpoint":
		return Problem{Field: "Cluster spec.controlPlaneEndpoint" + lowerFirst(rest)}
	case "ClusterName":
		return Problem{Field: "Cluster metadata.name"}
	case "Network":
		return Problem{Field: "Cluster spec.clusterNetwork" + networkField(rest)}
	}
	switch head {
	case "AgentToken":
		return Problem{Field: "the cluster's k3s agent token"}
	case "PKI":
		return Problem{Field: "the cluster certificates" + rest}
	case "Document":
		return Problem{Field: "the merged bootstrap document"}
	}
	return Problem{Field: "the generated " + head}
}

func splitField(f string) (head, rest string) {
	if i := strings.IndexAny(f, ".["); i >= 0 {
		return f[:i], f[i:]
	}
	return f, ""
}

// index parses a leading "[n]" and returns n and what follows (-1 without an index).
func index(rest string) (int, string) {
	if !strings.HasPrefix(rest, "[") {
		return -1, rest
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return -1, rest
	}
	n, err := strconv.Atoi(rest[1:end])
	if err != nil {
		return -1, rest
	}
	return n, rest[end+1:]
}

// lowerFirst turns ".Content" into ".content" (Node field names into API field names).
func lowerFirst(s string) string {
	if len(s) < 2 || s[0] != '.' {
		return s
	}
	return "." + strings.ToLower(s[1:2]) + s[2:]
}

func networkField(rest string) string {
	for from, to := range map[string]string{
		".APIServerPort": ".apiServerPort",
		".PodCIDRs":      ".pods.cidrBlocks",
		".ServiceCIDRs":  ".services.cidrBlocks",
		".ServiceDomain": ".serviceDomain",
	} {
		if strings.HasPrefix(rest, from) {
			return to + strings.TrimPrefix(rest, from)
		}
	}
	return rest
}
