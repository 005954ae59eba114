package cloudconfig

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func fullConfig() *Config {
	return &Config{
		Hostname: "node-{{ trunc 8 .MachineID }}",
		Users: []User{
			{Name: "kairos", Passwd: "kairos", Groups: []string{"admin", "wheel"}, SSHAuthorizedKeys: []string{"github:someone", "ssh-ed25519 AAAA x@y"}},
			{Name: "locked", LockPasswd: true},
		},
		Install: &Install{Auto: true, Device: "/dev/vda", Reboot: true},
		WriteFiles: []WriteFile{
			{Path: "/etc/a", Content: "a\n", Owner: "root:root", Permissions: "0644"},
			{Path: "/etc/b", Content: "YmluYXJ5", Encoding: "b64", Permissions: "0600"},
		},
		Stages: Stages{
			"network": {{Name: "net", Commands: []string{"echo net"}}},
			"boot": {{
				Name:               "files",
				If:                 "[ -e /x ]",
				OnlyServiceManager: "systemd",
				Directories:        []Directory{{Path: "/opt/x", Permissions: 0o755}},
				Files: []File{
					{Path: "/opt/x/script.sh", Permissions: 0o755, Content: "#!/bin/sh\necho hi\n"},
					{Path: "/opt/x/owned", Permissions: 0o640, Owner: 1000, Group: 1000, OwnerString: "kairos:kairos", Encoding: "b64", Content: "aGk="},
				},
				Commands:        []string{"systemctl daemon-reload"},
				Systemctl:       &Systemctl{Enable: []string{"a"}, Disable: []string{"b"}, Start: []string{"c"}, Mask: []string{"d"}, Overrides: []SystemctlOverride{{Service: "e", Name: "f.conf", Content: "[Service]\nX=1\n"}}},
				Environment:     map[string]string{"B": "2", "A": "1"},
				EnvironmentFile: "/etc/env",
			}},
			"initramfs.after": {{Name: "early"}},
			"custom":          {{Name: "custom"}},
		},
		K0s:       &Distribution{Enabled: true, Args: []string{"--enable-worker"}, Env: map[string]string{"Z": "z", "A": "a"}, ReplaceArgs: true, ReplaceEnv: true},
		K0sWorker: &Distribution{Enabled: true},
		K3s:       &Distribution{Enabled: true, EmbeddedRegistry: true},
		K3sAgent:  &Distribution{Enabled: false},
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := fullConfig()
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !HasHeader(data) || !bytes.HasPrefix(data, []byte(Header+"\n")) {
		t.Fatalf("header is not the first line:\n%s", data)
	}
	got, err := UnmarshalStrict(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip differs:\n got %#v\nwant %#v\n%s", got, c, data)
	}
	again, _ := c.Marshal()
	if !bytes.Equal(data, again) {
		t.Fatal("Marshal is not deterministic")
	}
}

func TestMarshalLayout(t *testing.T) {
	data, err := fullConfig().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{
		"    groups:\n      - admin\n      - wheel\n", // groups is a YAML list
		"          permissions: 493 # 0755\n",         // stage modes are integers
		"    permissions: \"0644\"\n",                 // write_files modes are strings
		"          ownerstring: kairos:kairos\n",
		"    A: a\n    Z: z\n", // sorted env
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	// Stages in execution order, unknown ones last.
	order := []string{"  initramfs.after:", "  boot:", "  network:", "  custom:"}
	last := -1
	for _, o := range order {
		i := strings.Index(s, "\n"+o+"\n")
		if i < 0 || i < last {
			t.Fatalf("stage %q out of order in\n%s", o, s)
		}
		last = i
	}
	if strings.Contains(s, "k3s-agent:\n  enabled: true") {
		t.Error("disabled block rendered as enabled")
	}
}

func TestEmptyStagesOmitted(t *testing.T) {
	c := &Config{Users: []User{{Name: "a"}}, Stages: Stages{"boot": nil}}
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "stages") {
		t.Fatalf("empty stages rendered:\n%s", data)
	}
}

// yipFile mirrors the decoding side of yip's schema.File: permissions is a
// number and a quoted value fails the whole document.
type yipFile struct {
	Path        string
	Permissions uint32
}

func TestPermissionsDecodeAsYipDoes(t *testing.T) {
	cases := []struct {
		doc     string
		want    uint32
		wantErr bool
	}{
		{"permissions: 420 # 0644\npath: /a\n", 0o644, false},
		{"permissions: 0644\npath: /a\n", 0o644, false},
		{"permissions: \"0644\"\npath: /a\n", 0, true},
	}
	for _, c := range cases {
		var f yipFile
		err := yaml.Unmarshal([]byte(c.doc), &f)
		if (err != nil) != c.wantErr || f.Permissions != c.want {
			t.Errorf("%q: got %o, %v", c.doc, f.Permissions, err)
		}
		var m struct{ Permissions Mode }
		err = yaml.Unmarshal([]byte(c.doc), &m)
		if (err != nil) != c.wantErr || uint32(m.Permissions) != c.want {
			t.Errorf("Mode %q: got %o, %v", c.doc, m.Permissions, err)
		}
	}
	// And what Marshal writes decodes as a number.
	data, err := (&Config{Stages: Stages{"boot": {{Files: []File{{Path: "/a", Permissions: 0o644}}}}}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Stages map[string][]struct{ Files []yipFile }
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Stages["boot"][0].Files[0].Permissions; got != 0o644 {
		t.Fatalf("got %o", got)
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{0: "0000", 0o600: "0600", 0o644: "0644", 0o755: "0755", 0o1777: "01777", 0o4755: "04755"} {
		if got := m.String(); got != want {
			t.Errorf("%o: got %s want %s", uint32(m), got, want)
		}
	}
	n, err := Mode(0o640).MarshalYAML()
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(map[string]any{"p": n})
	if err != nil || string(out) != "p: 416 # 0640\n" {
		t.Fatalf("got %q %v", out, err)
	}
}

func TestHasHeader(t *testing.T) {
	for doc, want := range map[string]bool{
		"#cloud-config\na: b\n":   true,
		"#cloud-config \r\n":      true,
		"a: b\n#cloud-config\n":   false,
		"# cloud-config\na: b\n":  false,
		"":                        false,
		"#cloud-config-archive\n": false,
	} {
		if got := HasHeader([]byte(doc)); got != want {
			t.Errorf("%q: got %v", doc, got)
		}
	}
}

func TestUnmarshalNonStrict(t *testing.T) {
	doc := "#cloud-config\np2p:\n  x: y\nhostname: h\n"
	if _, err := UnmarshalStrict([]byte(doc)); err == nil {
		t.Error("strict decoding accepted an unknown key")
	}
	c, err := Unmarshal([]byte(doc))
	if err != nil || c.Hostname != "h" {
		t.Fatalf("got %#v %v", c, err)
	}
}
