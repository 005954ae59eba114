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

// TestCheckFragmentNumbersAsYipApplies: every number of yip's schema (and the strings yip or the
// node reads as numbers or ids), in the shapes that yip decodes or applies as something other
// than what they look like. Each is refused at its path with what the node would do; the plain
// spellings next to them pass.
func TestCheckFragmentNumbersAsYipApplies(t *testing.T) {
	step := func(s string) string { return "stages:\n  boot:\n    - " + s + "\n" }
	file := func(kv string) string { return step("files:\n        - path: /etc/x\n          " + kv) }
	dir := func(kv string) string { return step("directories:\n        - path: /etc/x\n          " + kv) }
	download := func(kv string) string {
		return step("downloads:\n        - path: /etc/x\n          url: https://example.com/x\n          " + kv)
	}
	entity := func(lines string) string {
		return step("ensure_entities:\n        - path: /etc/passwd\n          entity: |\n            " + strings.ReplaceAll(lines, "\n", "\n            "))
	}
	for _, tc := range []struct {
		name, doc, path, want string // want "" passes
	}{
		// Modes: yip applies os.FileMode(permissions), which keeps only 0777.
		{"files permissions setuid", file("permissions: 04755"), "stages.boot[0].files[0].permissions", "04755 is applied as 0755"},
		{"files permissions 0o7777", file("permissions: 0o7777"), "stages.boot[0].files[0].permissions", "07777 is applied as 0777"},
		{"files permissions Go setuid bit", file("permissions: 0o40000755"), "stages.boot[0].files[0].permissions", "040000755 is applied as 04755"},
		{"directories permissions sticky", dir("permissions: 01777"), "stages.boot[0].directories[0].permissions", "01777 is applied as 0777"},
		{"downloads permissions setgid", download("permissions: 02755"), "stages.boot[0].downloads[0].permissions", "02755 is applied as 0755"},
		{"write_files permissions setuid", "write_files:\n  - path: /etc/x\n    permissions: \"4755\"\n", "write_files[0].permissions", "04755 is applied as 0755"},
		{"files permissions not octal", file("permissions: 0648"), "stages.boot[0].files[0].permissions", `"0648" is not an octal number (8 and 9 are not octal digits): yip reads it as the decimal number 648 (mode 01210)`},
		{"files permissions hex", file("permissions: 0x1a4"), "", ""},
		{"files permissions 0o", file("permissions: 0o755"), "", ""},
		{"directories permissions plus sign", dir("permissions: +0755"), "", ""},
		{"write_files permissions without zero", "write_files:\n  - path: /etc/x\n    permissions: \"644\"\n", "", ""},
		// Owners and groups: chown keeps the low 32 bits; -1 leaves the owner unchanged.
		{"files owner 2^32 is root", file("owner: 4294967296"), "stages.boot[0].files[0].owner", "so yip's chown sets 0, not 4294967296"},
		{"files group negative", file("group: -2"), "stages.boot[0].files[0].group", "so yip's chown sets 4294967294, not -2"},
		{"directories owner -1", dir("owner: -1"), "stages.boot[0].directories[0].owner", `-1 is not an id: chown reads it as "leave unchanged"`},
		{"downloads group (uid_t)-1", download("group: 4294967295"), "stages.boot[0].downloads[0].group", `4294967295 is not an id`},
		{"directories group leading zero", dir("group: 0100"), "stages.boot[0].directories[0].group", `write "0100" without the leading zero: yip reads it as the octal number 64`},
		{"downloads owner float", download("owner: 1e3"), "stages.boot[0].downloads[0].owner", `write the whole number itself, not "1e3": yip reads it as 1000`},
		{"files owner largest id", file("owner: 4294967294"), "", ""},
		{"files owner hex", file("owner: 0x3e8"), "", ""},
		// Numeric ids in owner strings are looked up as names.
		{"files ownerstring numeric", file("ownerstring: \"1000:1000\""), "stages.boot[0].files[0].ownerstring", `yip looks "1000" up as a user name, not an id`},
		{"downloads ownerstring numeric group", download("ownerstring: kairos:100"), "stages.boot[0].downloads[0].ownerstring", `yip looks "100" up as a group name`},
		{"write_files owner numeric", "write_files:\n  - path: /etc/x\n    owner: \"0:0\"\n", "write_files[0].owner", `yip looks "0" up as a user name, not an id`},
		{"files ownerstring names", file("ownerstring: kairos:admin"), "", ""},
		// Download timeouts: seconds times time.Second in 64 bits.
		{"downloads timeout overflow", download("timeout: 18446744074"), "stages.boot[0].downloads[0].timeout", "the download gets a timeout of 290.448384ms"},
		{"downloads timeout overflow negative", download("timeout: 9223372037"), "stages.boot[0].downloads[0].timeout", "the download gets no timeout at all"},
		{"downloads timeout leading zero", download("timeout: 030"), "stages.boot[0].downloads[0].timeout", "octal number 24"},
		{"downloads timeout largest", download("timeout: 9223372036"), "", ""},
		// Layout sizes: MiB times 1048576 in 64 bits.
		{"expand_partition size overflow", step("layout:\n        expand_partition:\n          size: 17592186044417"), "stages.boot[0].layout.expand_partition.size", "the size becomes 1 MiB"},
		{"add_partitions size overflow to zero", step("layout:\n        add_partitions:\n          - fsLabel: x\n            size: 17592186044416"), "stages.boot[0].layout.add_partitions[0].size", "the size becomes 0, which yip reads as all the space left"},
		{"add_partitions size leading zero", step("layout:\n        add_partitions:\n          - fsLabel: x\n            size: 01024"), "stages.boot[0].layout.add_partitions[0].size", "octal number 532"},
		{"expand_partition size plain", step("layout:\n        expand_partition:\n          size: 20480"), "", ""},
		// User uids are strings that yip reads with strconv.Atoi.
		{"stage users uid hex", step("users:\n        ops:\n          uid: 0x3e8"), "stages.boot[0].users.ops.uid", `"0x3e8" is not a decimal uid: yip reads the uid with strconv.Atoi, fails, and does not create the user`},
		{"stage users uid underscores", step("users:\n        ops:\n          uid: 1_000"), "stages.boot[0].users.ops.uid", `"1_000" is not a decimal uid`},
		{"stage users uid float", step("users:\n        ops:\n          uid: 1e3"), "stages.boot[0].users.ops.uid", `"1e3" is not a decimal uid`},
		{"stage users uid leading zero", step("users:\n        ops:\n          uid: 01000"), "stages.boot[0].users.ops.uid", `write "01000" without the leading zero: yip reads the uid as the decimal number 1000`},
		{"users uid negative", "users:\n  - name: ops\n    uid: -1\n", "users[0].uid", `a uid is a number from 0 to 4294967294, not "-1"`},
		{"users uid beyond 32 bits", "users:\n  - name: ops\n    uid: \"4294967296\"\n", "users[0].uid", `not "4294967296"`},
		{"users uid plain", "users:\n  - name: ops\n    uid: 1000\n", "", ""},
		{"stage users uid quoted", step("users:\n        ops:\n          uid: \"1001\""), "", ""},
		// Entities are YAML documents of their own, with integer uid and gid.
		{"ensure_entities user uid leading zero", entity("kind: user\nusername: ops\nuid: 01000\ngid: 1000"), "stages.boot[0].ensure_entities[0].entity.uid", "octal number 512"},
		{"ensure_entities user gid underscores", entity("kind: user\nusername: ops\nuid: 1000\ngid: 1_000"), "stages.boot[0].ensure_entities[0].entity.gid", "without underscores"},
		{"ensure_entities group gid float", entity("kind: group\ngroup_name: ops\ngid: 1e3"), "stages.boot[0].ensure_entities[0].entity.gid", `write the whole number itself, not "1e3"`},
		{"ensure_entities user uid string", entity("kind: user\nusername: ops\nuid: x1000"), "stages.boot[0].ensure_entities[0].entity.uid", "must be a whole number"},
		{"ensure_entities unknown kind", entity("kind: users\nusername: ops"), "stages.boot[0].ensure_entities[0].entity.kind", `must be user, shadow, group or gshadow, not "users"`},
		{"ensure_entities unknown key", entity("kind: user\nusername: ops\nuid: 1000\nhome: /x"), "stages.boot[0].ensure_entities[0].entity.home", "is not a key yip knows here"},
		{"delete_entities not a mapping", step("delete_entities:\n        - path: /etc/passwd\n          entity: ops"), "stages.boot[0].delete_entities[0].entity", "must be a YAML mapping"},
		{"ensure_entities user plain", entity("kind: user\nusername: ops\nuid: 1000\ngid: 1000\nhomedir: /home/ops\nshell: /bin/sh"), "", ""},
		{"ensure_entities user auto uid", entity("kind: user\nusername: ops\nuid: -1\ngid: 1000"), "", ""},
		{"ensure_entities template", entity("kind: user\nusername: ops\nuid: {{ .Values.uid }}"), "", ""},
		// sysctl values go to /proc/sys as written; the kernel reads numbers with base 0.
		{"sysctl value leading zero", step("sysctl:\n        vm.swappiness: \"010\""), "stages.boot[0].sysctl.vm.swappiness", `write "010" without the leading zero: the kernel reads it as the octal number 8`},
		{"sysctl range leading zero", step("sysctl:\n        net.ipv4.ip_local_port_range: 32768 060999"), "stages.boot[0].sysctl.net.ipv4.ip_local_port_range", `the kernel reads a leading zero as octal and refuses it`},
		{"sysctl plain", step("sysctl:\n        vm.swappiness: 10\n        net.ipv4.ip_local_port_range: 32768 60999\n        kernel.core_pattern: core.%p"), "", ""},
	} {
		problems := CheckFragment([]byte(tc.doc))
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: refused: %v", tc.name, problems)
		case tc.want != "" && (len(problems) != 1 || problems[0].Path != tc.path || !strings.Contains(problems[0].Message, tc.want)):
			t.Errorf("%s: problems %v, want one at %s containing %q", tc.name, problems, tc.path, tc.want)
		}
	}
	// These are what the node does, whoever wrote them: a whole document is refused too.
	doc := Header + "\n" + file("permissions: 420 # 0644") + "        - path: /usr/local/bin/x\n          permissions: 2541 # 04755\n"
	if p := CheckNode([]byte(doc)); len(p) != 1 || p[0].Path != "stages.boot[0].files[1].permissions" {
		t.Errorf("a whole document's setuid mode: %v", p)
	}
}
