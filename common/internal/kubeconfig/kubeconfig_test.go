package kubeconfig

import (
	"strings"
	"testing"
)

func TestRoundTripAndCurrent(t *testing.T) {
	c := New("cl", "ctx", "https://h:6443", []byte("CA"), "u", AuthInfo{Token: "t"})
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Keys in clientcmd's order.
	order := []string{"apiVersion:", "clusters:", "contexts:", "current-context:", "kind:", "preferences:", "users:"}
	last := -1
	for _, k := range order {
		i := strings.Index(string(data), "\n"+k)
		if k == "apiVersion:" {
			i = strings.Index(string(data), k)
		}
		if i < last {
			t.Fatalf("%s out of order:\n%s", k, data)
		}
		last = i
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cl, u, err := back.Current()
	if err != nil || cl.Server != "https://h:6443" || cl.CertificateAuthorityData != "Q0E=" || u.Name != "u" || u.User.Token != "t" {
		t.Fatalf("%+v %+v %v", cl, u, err)
	}
	for _, broken := range []func(c *Config){
		func(c *Config) { c.CurrentContext = "nope" },
		func(c *Config) { c.Contexts[0].Context.Cluster = "nope" },
		func(c *Config) { c.Contexts[0].Context.User = "nope" },
	} {
		b, _ := Parse(data)
		broken(b)
		if _, _, err := b.Current(); err == nil {
			t.Error("broken kubeconfig accepted")
		}
	}
	if _, err := Parse([]byte("- a")); err == nil {
		t.Error("junk parsed")
	}
}
