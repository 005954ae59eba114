package cloudconfig

import (
	"strings"
	"testing"

	yipschema "github.com/mudler/yip/pkg/schema"
	"go.yaml.in/yaml/v3"
)

// TestCheckNode lists documents a Kairos node misreads (each of them passed
// before the node-semantics check existed) and documents it reads fully.
func TestCheckNode(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		// want are substrings of the problems, in order; none means valid.
		want []string
	}{
		{name: "valid", doc: "#cloud-config\nusers:\n  - name: kairos\n    groups: [admin]\nstages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: 0644\n          content: x\n"},
		{name: "empty document", doc: "#cloud-config\n"},
		{
			name: "quoted stage file permissions drop every stage",
			doc:  "#cloud-config\nstages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: \"0644\"\n",
			want: []string{`stages.boot[0].files[0].permissions: must be an unquoted YAML integer such as 0644, not the string "0644"`},
		},
		{
			name: "groups as a string fails the whole document",
			doc:  "#cloud-config\nusers:\n  - name: kairos\n    groups: \"admin, users\"\n",
			want: []string{"users[0].groups: must be a YAML list", "a comma-separated string makes yip refuse the whole document"},
		},
		{
			name: "user defined twice",
			doc:  "#cloud-config\nusers:\n  - name: kairos\n  - name: ops\n  - name: kairos\n    passwd: x\n",
			want: []string{`users[2]: user "kairos" is already defined at users[0]`},
		},
		{
			name: "user redefined in a stage",
			doc:  "#cloud-config\nusers:\n  - name: kairos\nstages:\n  boot:\n    - users:\n        kairos:\n          passwd: other\n",
			want: []string{`stages.boot[0].users.kairos: user "kairos" is already defined at users[0]`},
		},
		{
			name: "owner_string is ignored by yip",
			doc:  "#cloud-config\nstages:\n  boot:\n    - files:\n        - path: /etc/x\n          owner_string: a:b\n",
			want: []string{`stages.boot[0].files[0].owner_string: is not a key yip knows here`, `"ownerstring"`},
		},
		{
			name: "unknown step key",
			doc:  "#cloud-config\nstages:\n  boot:\n    - comands: [ls]\n",
			want: []string{"stages.boot[0].comands: is not a key yip knows here"},
		},
		{
			name: "stage that is not a list",
			doc:  "#cloud-config\nstages:\n  boot:\n    commands: [ls]\n",
			want: []string{"stages.boot: must be a list of steps, not a mapping"},
		},
		{
			name: "write_files permissions that are not octal",
			doc:  "#cloud-config\nwrite_files:\n  - path: /etc/x\n    permissions: \"0999\"\n",
			want: []string{`write_files[0].permissions: "0999" is not an octal file mode`},
		},
		{
			name: "missing header",
			doc:  "users:\n  - name: kairos\n",
			want: []string{`the first line must be "#cloud-config"`},
		},
		{
			name: "not a mapping",
			doc:  "#cloud-config\n- a\n",
			want: []string{"the document must be a YAML mapping"},
		},
		{
			name: "invalid UTF-8",
			doc:  "#cloud-config\nhostname: \xff\n",
			want: []string{"is not valid YAML: invalid leading UTF-8 octet"},
		},
		{
			name: "runcmd as a string",
			doc:  "#cloud-config\nruncmd: ls\n",
			want: []string{"runcmd: must be a YAML list"},
		},
		{
			name: "repeated key",
			doc:  "#cloud-config\nhostname: a\nhostname: b\n",
			want: []string{"hostname: is set twice"},
		},
		{
			name: "merge keys are read like yip reads them",
			doc:  "#cloud-config\nstages:\n  boot:\n    - &base\n      name: a\n      commands: [ls]\n    - <<: *base\n      name: b\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckNode([]byte(tc.doc))
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("unexpected problems: %v", got)
				}
				return
			}
			if len(got) == 0 {
				t.Fatal("no problem reported")
			}
			text := ""
			for _, p := range got {
				text += p.String() + "\n"
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("problems do not contain %q:\n%s", w, text)
				}
			}
		})
	}
}

// TestCheckNodeAgreesWithYip makes sure that what yip itself refuses or
// silently drops is reported: the path-by-path checks are only there to name
// the field.
func TestCheckNodeAgreesWithYip(t *testing.T) {
	docs := []string{
		"#cloud-config\nusers:\n  - name: kairos\n    groups: admin\n",
		"#cloud-config\nstages:\n  boot:\n    - files:\n        - path: /x\n          permissions: \"0600\"\n",
		"#cloud-config\nstages:\n  boot:\n    - directories:\n        - path: /x\n          owner: root\n",
		"#cloud-config\nwrite_files:\n  - path: /x\n    permissions: rw\n",
		"#cloud-config\nstages: [a]\n",
		"#cloud-config\nstages:\n  boot:\n    - systemctl:\n        enable: sshd\n",
	}
	for _, doc := range docs {
		_, loadErr := yipschema.Load(doc, nil, nil, nil)
		var stages yipschema.YipConfig
		stagesErr := yaml.Unmarshal([]byte(doc), &stages)
		if loadErr == nil && stagesErr == nil {
			t.Errorf("yip accepts this document, the test case is wrong:\n%s", doc)
			continue
		}
		if len(CheckNode([]byte(doc))) == 0 {
			t.Errorf("yip refuses (%v / %v) but CheckNode reports nothing:\n%s", loadErr, stagesErr, doc)
		}
	}
}

func TestCheckFragmentNeedsNoHeader(t *testing.T) {
	if p := CheckFragment([]byte("stages:\n  boot:\n    - commands: [ls]\n")); len(p) != 0 {
		t.Fatalf("a fragment without header is refused: %v", p)
	}
	if p := CheckNode([]byte("stages:\n  boot:\n    - commands: [ls]\n")); len(p) == 0 {
		t.Fatal("a document without header passes")
	}
}

func TestUsers(t *testing.T) {
	got := Users([]byte("#cloud-config\nusers:\n  - name: a\n  - name: b\nstages:\n  boot:\n    - users:\n        z: {}\n        c: {}\n"))
	want := []UserDefinition{{"a", "users[0]"}, {"b", "users[1]"}, {"c", "stages.boot[0].users.c"}, {"z", "stages.boot[0].users.z"}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestCheckFragmentNumbersMeanWhatTheySay: numbers that yip decodes leniently into something
// other than what they look like are refused in a user's fragment, at their path, with the
// value yip would use; numbers written plainly pass.
func TestCheckFragmentNumbersMeanWhatTheySay(t *testing.T) {
	file := func(kv string) []byte {
		return []byte("stages:\n  boot:\n    - files:\n        - path: /etc/x\n          content: x\n          " + kv + "\n")
	}
	for _, tc := range []struct {
		kv, want string // want: "" passes
	}{
		{"permissions: 0644", ""},
		{"permissions: 0o600", ""},
		{"permissions: 0", ""},
		{"owner: 1000", ""},
		{"owner: 0", ""},
		{"permissions: 644", "a mode is octal: write it with a leading zero (0644), not \"644\", which yip reads as the decimal number 644 (mode 01204)"},
		{"permissions: 420.0", "write the whole number itself, not \"420.0\": yip reads it as 420"},
		{"owner: 01000", "write \"01000\" without the leading zero: yip reads it as the octal number 512"},
		{"group: 1_000", "write the number without underscores, not \"1_000\": yip reads it as 1000"},
		{"owner: 1e3", "write the whole number itself, not \"1e3\": yip reads it as 1000"},
	} {
		problems := CheckFragment(file(tc.kv))
		key, _, _ := strings.Cut(tc.kv, ":")
		wantPath := "stages.boot[0].files[0]." + key
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: refused: %v", tc.kv, problems)
		case tc.want != "" && (len(problems) != 1 || problems[0].Path != wantPath || problems[0].Message != tc.want):
			t.Errorf("%s: problems %v, want one at %s saying %q", tc.kv, problems, wantPath, tc.want)
		}
	}
	// Whole documents are the renderer's own: modes there are decimal with the octal spelling
	// in a comment (Mode.MarshalYAML), and stay accepted.
	if p := CheckNode(append([]byte(Header+"\n"), file("permissions: 420 # 0644")...)); len(p) != 0 {
		t.Errorf("a rendered document's decimal mode is refused: %v", p)
	}
}
