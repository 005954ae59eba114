package cloudconfig

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validDoc is a complete controller document in the shape our renderer
// writes. Documents of the table are edits of it.
const validDoc = `#cloud-config
hostname: cp-{{ .MachineID }}
users:
  - name: kairos
    lock_passwd: true
    groups:
      - admin
    ssh_authorized_keys:
      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKairosCapiTestKeyOnly test@example
install:
  auto: true
  device: auto
  reboot: true
write_files:
  - path: /etc/k0s/k0s.yaml
    permissions: "0644"
    owner: "root:root"
    content: |
      apiVersion: k0s.k0sproject.io/v1beta1
      kind: ClusterConfig
      metadata:
        name: k0s
  - path: /var/lib/k0s/manifests/addons/note.yaml
    permissions: "0600"
    content: |
      # a manifest whose template markers are escaped: {{"{{"}} .Values.x {{"}}"}}
      kind: ConfigMap
runcmd:
  - echo runcmd
stages:
  boot.before:
    - name: seed PKI
      directories:
        - path: /var/lib/k0s/pki
          permissions: 448 # 0700
          owner: 0
          group: 0
      files:
        - path: /var/lib/k0s/pki/ca.crt
          permissions: 420 # 0644
          owner: 0
          group: 0
          content: |
            -----BEGIN CERTIFICATE-----
            MIIB
            -----END CERTIFICATE-----
      commands:
        - echo seeded > /run/pki-seeded
k0s:
  enabled: true
  args:
    - --enable-worker
    - --token-file /etc/k0s/token
  env:
    K0S_DEBUG: "1"
`

// noteEntry is the second write_files entry of validDoc.
const noteEntry = `  - path: /var/lib/k0s/manifests/addons/note.yaml
    permissions: "0600"
    content: |
      # a manifest whose template markers are escaped: {{"{{"}} .Values.x {{"}}"}}
      kind: ConfigMap
`

// b64Note is noteEntry with a base64 content.
func b64Note(content string) string {
	return "  - path: /var/lib/k0s/manifests/addons/note.yaml\n    permissions: \"0600\"\n    encoding: b64\n    content: " +
		base64.StdEncoding.EncodeToString([]byte(content)) + "\n"
}

func edit(t *testing.T, old, new string) string {
	t.Helper()
	require.Contains(t, validDoc, old, "test edit does not apply")
	return strings.Replace(validDoc, old, new, 1)
}

func problemsOf(err error) []string {
	var e *Error
	if errors.As(err, &e) {
		return e.Problems
	}
	return nil
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		// wantErr holds substrings that must all appear in one reported
		// problem each; empty means the document must pass.
		wantErr []string
	}{
		{
			name: "valid controller document",
			doc:  validDoc,
		},
		{
			name:    "missing header",
			doc:     strings.TrimPrefix(validDoc, "#cloud-config\n"),
			wantErr: []string{`first line must be "#cloud-config"`, "not recognise the document as a cloud-config"},
		},
		{
			name:    "header after a comment",
			doc:     "# rendered by kairos-capi\n" + validDoc,
			wantErr: []string{`first line must be "#cloud-config"`},
		},
		{
			name:    "quoted stage file permissions drop the stages",
			doc:     edit(t, "permissions: 420 # 0644", `permissions: "0644"`),
			wantErr: []string{"drop every stage", `stage "boot.before": the document has 1 step(s) but yip loaded 0: the stages would be dropped`},
		},
		{
			name:    "unknown key in a stage file",
			doc:     edit(t, "          owner: 0\n          group: 0\n          content:", "          owner_string: root:root\n          content:"),
			wantErr: []string{"stages hold keys that yip ignores", "owner_string"},
		},
		{
			name:    "unknown key in the k0s block",
			doc:     edit(t, "k0s:\n  enabled: true\n", "k0s:\n  enabled: true\n  config: /etc/k0s/k0s.yaml\n"),
			wantErr: []string{"k0s/k3s blocks", `field config not found`},
		},
		{
			name:    "args as a string in the k0s block",
			doc:     edit(t, "  args:\n    - --enable-worker\n    - --token-file /etc/k0s/token\n", "  args: --enable-worker\n"),
			wantErr: []string{"k0s/k3s blocks", "cannot unmarshal"},
		},
		{
			name:    "k0s block not enabled",
			doc:     edit(t, "k0s:\n  enabled: true\n", "k0s:\n"),
			wantErr: []string{"k0s: enabled must be true"},
		},
		{
			name:    "k0s and k3s blocks together",
			doc:     validDoc + "k3s:\n  enabled: true\n  embedded_registry: true\n",
			wantErr: []string{"one distribution role", "k0s, k3s"},
		},
		{
			name:    "groups as a comma string",
			doc:     edit(t, "    groups:\n      - admin\n", "    groups: \"admin,wheel\"\n"),
			wantErr: []string{"yip cannot load the document", "kairos schema: /users/0/groups"},
		},
		{
			name:    "unknown user key",
			doc:     edit(t, "    lock_passwd: true\n", "    lock_passwd: true\n    lock-passwd: true\n"),
			wantErr: []string{"users/write_files/growpart hold keys that yip ignores", "lock-passwd"},
		},
		{
			name:    "no users",
			doc:     edit(t, "users:\n  - name: kairos\n    lock_passwd: true\n    groups:\n      - admin\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKairosCapiTestKeyOnly test@example\n", ""),
			wantErr: []string{"kairos schema: (document): missing properties: 'users'"},
		},
		{
			name:    "unescaped template in a write_files content",
			doc:     edit(t, "        name: k0s\n", "        name: k0s-{{ .MachineID }}\n"),
			wantErr: []string{"file /etc/k0s/k0s.yaml: yip's templating changes it on the node", `intended "  name: k0s-{{ .MachineID }}", node gets "  name: k0s-<no value>"`},
		},
		{
			name:    "unescaped template in a stage file content",
			doc:     edit(t, "            MIIB\n", "            {{ .Values.hostname }}\n"),
			wantErr: []string{"stage boot.before step 0 (seed PKI), file /var/lib/k0s/pki/ca.crt: yip's templating changes it"},
		},
		{
			name:    "unescaped template in base64 content",
			doc:     edit(t, noteEntry, b64Note("x: {{ .X }}\n")),
			wantErr: []string{"file /var/lib/k0s/manifests/addons/note.yaml: yip's templating changes it"},
		},
		{
			name:    "broken template in a command",
			doc:     edit(t, "        - echo seeded > /run/pki-seeded\n", "        - echo '{{ .Unclosed'\n"),
			wantErr: []string{"command: yip warns: Failed rendering"},
		},
		{
			name:    "unescaped template in a runcmd command",
			doc:     edit(t, "  - echo runcmd\n", "  - echo {{ .Values.hostname }}\n"),
			wantErr: []string{"command: yip's templating changes it on the node"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check([]byte(tt.doc))
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			probs := problemsOf(err)
			require.NotEmpty(t, probs, "Check must return an *Error")
			for _, want := range tt.wantErr {
				found := false
				for _, p := range probs {
					if strings.Contains(p, want) {
						found = true
						break
					}
				}
				assert.True(t, found, "no problem mentions %q in:\n%v", want, err)
			}
		})
	}
}

func TestEscapedTemplateRoundTrips(t *testing.T) {
	doc := []byte(edit(t, "        name: k0s\n", "        name: k0s\n      data: '{{\"{{\"}} .X }}'\n"))
	require.NoError(t, Check(doc))

	files, err := RenderedFiles(doc)
	require.NoError(t, err)
	assert.Contains(t, files["/etc/k0s/k0s.yaml"], "data: '{{ .X }}'\n")
	assert.Equal(t, "# a manifest whose template markers are escaped: {{ .Values.x }}\nkind: ConfigMap\n",
		files["/var/lib/k0s/manifests/addons/note.yaml"])
	assert.Equal(t, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", files["/var/lib/k0s/pki/ca.crt"])
	assert.Len(t, files, 3)
}

func TestRenderedFilesDecodesBeforeTemplating(t *testing.T) {
	doc := []byte(edit(t, noteEntry, b64Note(`literal {{"{{"}} .Y }}`+"\n")))
	require.NoError(t, Check(doc))
	files, err := RenderedFiles(doc)
	require.NoError(t, err)
	assert.Equal(t, "literal {{ .Y }}\n", files["/var/lib/k0s/manifests/addons/note.yaml"])
}

func TestRenderedCommands(t *testing.T) {
	doc := []byte(edit(t, "  - echo runcmd\n", "  - echo '{{\"{{\"}} .Z }}'\n"))
	require.NoError(t, Check(doc))
	cmds, err := RenderedCommands(doc)
	require.NoError(t, err)
	// boot.before runs before boot, where yip puts runcmd.
	assert.Equal(t, []string{"echo seeded > /run/pki-seeded", "echo '{{ .Z }}'"}, cmds)
}

func TestStages(t *testing.T) {
	stages, err := Stages([]byte(validDoc))
	require.NoError(t, err)
	require.Len(t, stages["boot.before"], 1)
	assert.Equal(t, "seed PKI", stages["boot.before"][0].Name)
	assert.Equal(t, uint32(0o644), stages["boot.before"][0].Files[0].Permissions)
	// write_files, users and runcmd become the first boot step.
	require.NotEmpty(t, stages["boot"])
	assert.Len(t, stages["boot"][0].Files, 2)
	assert.Equal(t, []string{"echo runcmd"}, stages["boot"][0].Commands)
	assert.Contains(t, stages["boot"][0].Users, "kairos")
	require.NotEmpty(t, stages["initramfs"])
	assert.Equal(t, "cp-{{ .MachineID }}", stages["initramfs"][0].Hostname)
}
