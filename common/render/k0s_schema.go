package render

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// K0sSchemaVersion is the k0s release whose ClusterConfig fields
// k0sClusterConfigSchema mirrors.
//
// k0s reads /etc/k0s/k0s.yaml strictly (pkg/apis/k0s/v1beta1
// clusterconfig_types.go, MergedWithYAML: an unknown field fails the
// controller's start), so a ClusterConfig the node cannot read must be
// refused before any Secret is written. k0s' own API types would be the
// exact check, but the Go module proxy does not serve github.com/k0sproject/k0s
// (asked for v1.34.1+k0s.0 and v1.33.5+k0s.0: 403 "This module version is not
// available"; k0s tags carry build metadata that Go modules drop). So this
// is a hand-kept list of the fields of k0s' pkg/apis/k0s/v1beta1 at
// K0sSchemaVersion, with the value kinds k0s decodes them into and the
// checks k0s' own Validate methods make on the fields users most often get
// wrong (CIDRs, ports, enumerations). Bump it together with the list when
// the images move to a newer k0s.
const K0sSchemaVersion = "v1.34.1+k0s.0"

type k0sValueKind int

const (
	k0sString k0sValueKind = iota
	k0sInt
	k0sBool
	k0sDuration
	k0sScalar // any scalar (k0s' BackwardCompatibleDuration takes strings and numbers)
	k0sAny    // free-form (ObjectMeta, worker profile values)
	k0sObject
	k0sList
	k0sMap // string keys, values of elem
)

type k0sField struct {
	kind   k0sValueKind
	fields map[string]*k0sField // k0sObject
	elem   *k0sField            // k0sList, k0sMap
	// valid returns a problem with a scalar value, or "".
	valid func(v any) string
}

func kObj(fields map[string]*k0sField) *k0sField { return &k0sField{kind: k0sObject, fields: fields} }
func kList(elem *k0sField) *k0sField             { return &k0sField{kind: k0sList, elem: elem} }
func kStr() *k0sField                            { return &k0sField{kind: k0sString} }
func kInt() *k0sField                            { return &k0sField{kind: k0sInt} }
func kBool() *k0sField                           { return &k0sField{kind: k0sBool} }
func kDur() *k0sField                            { return &k0sField{kind: k0sDuration} }
func kStrMap() *k0sField                         { return &k0sField{kind: k0sMap, elem: kStr()} }
func kStrList() *k0sField                        { return kList(kStr()) }
func kCheck(kind k0sValueKind, check func(any) string) *k0sField {
	return &k0sField{kind: kind, valid: check}
}

func kEnum(values ...string) *k0sField {
	return kCheck(k0sString, func(v any) string {
		if slices.Contains(values, v.(string)) {
			return ""
		}
		return fmt.Sprintf("%q is not one of %s", v, strings.Join(values, ", "))
	})
}

func kCIDR() *k0sField {
	return kCheck(k0sString, func(v any) string {
		if _, _, err := net.ParseCIDR(v.(string)); err != nil {
			return fmt.Sprintf("%q is not a CIDR such as 10.244.0.0/16", v)
		}
		return ""
	})
}

func kPort() *k0sField {
	return kCheck(k0sInt, func(v any) string {
		if p := v.(int); p < 1 || p > 65535 {
			return fmt.Sprintf("%d is not a TCP port", p)
		}
		return ""
	})
}

func kIP() *k0sField {
	return kCheck(k0sString, func(v any) string {
		if net.ParseIP(v.(string)) == nil {
			return fmt.Sprintf("%q is not an IP address", v)
		}
		return ""
	})
}

func kDNS() *k0sField {
	return kCheck(k0sString, func(v any) string {
		if !isDNSName(v.(string)) {
			return fmt.Sprintf("%q is not a DNS name", v)
		}
		return ""
	})
}

func kImage() *k0sField { return kObj(map[string]*k0sField{"image": kStr(), "version": kStr()}) }

func kArgs() map[string]*k0sField {
	return map[string]*k0sField{"extraArgs": kStrMap(), "rawArgs": kStrList()}
}

func with(m map[string]*k0sField, more map[string]*k0sField) map[string]*k0sField {
	for k, v := range more {
		m[k] = v
	}
	return m
}

// k0sClusterConfigSchema mirrors ClusterConfig of k0s K0sSchemaVersion
// (k0s pkg/apis/k0s/v1beta1: clusterconfig_types.go, api.go, network.go,
// calico.go, kuberouter.go, kubeproxy.go, nllb.go, cplb.go, dualstack.go,
// storage.go, images.go, extensions.go, konnectivity.go, telemetry.go,
// workerprofile.go, feature_gates.go, cert.go, system.go).
var k0sClusterConfigSchema = func() *k0sField {
	ca := kObj(map[string]*k0sField{"expiresAfter": kDur(), "certificatesExpireAfter": kDur()})
	proxySync := map[string]*k0sField{"syncPeriod": kDur(), "minSyncPeriod": kDur()}
	spec := kObj(map[string]*k0sField{
		"api": kObj(with(kArgs(), map[string]*k0sField{
			"address": kIP(), "onlyBindToAddress": kBool(), "externalAddress": kStr(),
			"k0sApiPort": kPort(), "port": kPort(), "sans": kStrList(), "ca": ca,
		})),
		"controllerManager": kObj(kArgs()),
		"scheduler":         kObj(kArgs()),
		"storage": kObj(map[string]*k0sField{
			"type": kEnum("etcd", "kine"),
			"kine": kObj(map[string]*k0sField{"dataSource": kStr()}),
			"etcd": kObj(with(kArgs(), map[string]*k0sField{
				"peerAddress": kStr(), "ca": ca,
				"externalCluster": kObj(map[string]*k0sField{
					"endpoints": kStrList(), "etcdPrefix": kStr(), "caFile": kStr(),
					"clientCertFile": kStr(), "clientKeyFile": kStr(),
				}),
			})),
		}),
		"network": kObj(map[string]*k0sField{
			"provider":             kEnum("kuberouter", "calico", "custom"),
			"podCIDR":              kCIDR(),
			"serviceCIDR":          kCIDR(),
			"clusterDomain":        kDNS(),
			"primaryAddressFamily": kEnum("IPv4", "IPv6"),
			"dualStack":            kObj(map[string]*k0sField{"enabled": kBool(), "IPv6podCIDR": kCIDR(), "IPv6serviceCIDR": kCIDR()}),
			"calico": kObj(map[string]*k0sField{
				"wireguard": kBool(), "envVars": kStrMap(), "flexVolumeDriverPath": kStr(),
				"ipAutodetectionMethod": kStr(), "ipV6AutodetectionMethod": kStr(), "mtu": kInt(),
				"mode": kEnum("bird", "vxlan", "ipip"), "overlay": kStr(), "vxlanPort": kPort(), "vxlanVNI": kInt(),
			}),
			"kuberouter": kObj(with(kArgs(), map[string]*k0sField{
				"autoMTU": kBool(), "mtu": kInt(), "metricsPort": kInt(), "hairpin": kStr(), "hairpinMode": kBool(),
				"ipMasq": kBool(), "peerRouterASNs": kStr(), "peerRouterIPs": kStr(),
			})),
			"kubeProxy": kObj(with(kArgs(), map[string]*k0sField{
				"disabled": kBool(), "mode": kStr(), "metricsBindAddress": kStr(), "nodePortAddresses": kStrList(),
				"iptables": kObj(with(map[string]*k0sField{"masqueradeBit": kInt(), "masqueradeAll": kBool(), "localhostNodePorts": kBool()}, proxySync)),
				"ipvs": kObj(with(map[string]*k0sField{
					"scheduler": kStr(), "excludeCIDRs": kStrList(), "strictARP": kBool(),
					"tcpTimeout": kDur(), "tcpFinTimeout": kDur(), "udpTimeout": kDur(),
				}, map[string]*k0sField{"syncPeriod": kDur(), "minSyncPeriod": kDur()})),
				"nftables": kObj(with(map[string]*k0sField{"masqueradeBit": kInt(), "masqueradeAll": kBool()}, map[string]*k0sField{"syncPeriod": kDur(), "minSyncPeriod": kDur()})),
			})),
			"nodeLocalLoadBalancing": kObj(map[string]*k0sField{
				"enabled": kBool(), "type": kEnum("EnvoyProxy"),
				"envoyProxy": kObj(map[string]*k0sField{
					"image": kImage(), "imagePullPolicy": kStr(), "apiServerBindPort": kPort(), "konnectivityServerBindPort": kPort(),
				}),
			}),
			"controlPlaneLoadBalancing": kObj(map[string]*k0sField{
				"enabled": kBool(), "type": kEnum("Keepalived"),
				"keepalived": kObj(map[string]*k0sField{
					"vrrpInstances": kList(kObj(map[string]*k0sField{
						"virtualIPs": kStrList(), "interface": kStr(), "virtualRouterID": kInt(), "advertIntervalSeconds": kInt(),
						"authPass": kStr(), "unicastPeers": kStrList(), "unicastSourceIP": kStr(), "addressLabel": kInt(),
					})),
					"virtualServers": kList(kObj(map[string]*k0sField{
						"ipAddress": kStr(), "delayLoop": kDur(), "lbAlgo": kStr(), "lbKind": kStr(), "persistenceTimeoutSeconds": kInt(),
					})),
					"userSpaceProxyBindPort": kPort(), "disableLoadBalancer": kBool(),
				}),
			}),
		}),
		"workerProfiles": kList(kObj(map[string]*k0sField{"name": kStr(), "values": {kind: k0sAny}})),
		"telemetry":      kObj(map[string]*k0sField{"enabled": kBool()}),
		"installConfig": kObj(map[string]*k0sField{"users": kObj(map[string]*k0sField{
			"etcdUser": kStr(), "kineUser": kStr(), "konnectivityUser": kStr(), "kubeAPIserverUser": kStr(), "kubeSchedulerUser": kStr(),
		})}),
		"images": kObj(map[string]*k0sField{
			"konnectivity": kImage(), "pushgateway": kImage(), "metricsserver": kImage(), "kubeproxy": kImage(),
			"coredns": kImage(), "pause": kImage(), "repository": kStr(), "default_pull_policy": kStr(),
			"windows": kObj(map[string]*k0sField{"kubeproxy": kImage(), "pause": kImage()}),
			"calico": kObj(map[string]*k0sField{
				"cni": kImage(), "node": kImage(), "kubecontrollers": kImage(),
				"windows": kObj(map[string]*k0sField{"cni": kImage(), "node": kImage()}),
			}),
			"kuberouter": kObj(map[string]*k0sField{"cni": kImage(), "cniInstaller": kImage()}),
		}),
		"extensions": kObj(map[string]*k0sField{
			"storage": kObj(map[string]*k0sField{"type": kStr(), "create_default_storage_class": kBool()}),
			"helm": kObj(map[string]*k0sField{
				"concurrencyLevel": kInt(),
				"repositories": kList(kObj(map[string]*k0sField{
					"name": kStr(), "url": kStr(), "insecure": kBool(), "caFile": kStr(), "certFile": kStr(),
					"keyfile": kStr(), "username": kStr(), "password": kStr(),
				})),
				"charts": kList(kObj(map[string]*k0sField{
					"name": kStr(), "chartname": kStr(), "version": kStr(), "values": kStr(), "namespace": kStr(),
					"timeout": {kind: k0sScalar}, "forceUpgrade": kBool(), "order": kInt(),
				})),
			}),
		}),
		"konnectivity": kObj(map[string]*k0sField{"adminPort": kPort(), "agentPort": kPort(), "externalAddress": kStr()}),
		"featureGates": kList(kObj(map[string]*k0sField{"name": kStr(), "enabled": kBool(), "components": kStrList()})),
	})
	return kObj(map[string]*k0sField{
		"apiVersion": kStr(),
		"kind":       kStr(),
		"metadata":   {kind: k0sAny},
		"spec":       spec,
		"status":     {kind: k0sAny},
	})
}()

// k0sIgnoredFields are accepted anywhere: k0s drops them before its strict
// decode (clusterconfig_types.go, YamlUnmarshalStrictIgnoringFields).
var k0sIgnoredFields = []string{"interval", "podSecurityPolicy"}

// checkK0sConfig reports every field of a decoded ClusterConfig that k0s
// K0sSchemaVersion would refuse, as (key path, message) pairs.
func checkK0sConfig(v any) [][2]string {
	var out [][2]string
	k0sClusterConfigSchema.check(v, "", &out)
	return out
}

func (f *k0sField) check(v any, path string, out *[][2]string) {
	add := func(format string, args ...any) { *out = append(*out, [2]string{path, fmt.Sprintf(format, args...)}) }
	if v == nil {
		return // null is the zero value for k0s' JSON decoder
	}
	switch f.kind {
	case k0sAny:
		return
	case k0sObject:
		m, ok := v.(map[string]any)
		if !ok {
			add("must be a mapping, not %s", describeValue(v))
			return
		}
		for _, k := range sortedKeys(m) {
			child, ok := f.fields[k]
			if !ok {
				if slices.Contains(k0sIgnoredFields, k) {
					continue
				}
				*out = append(*out, [2]string{joinPath(path, k), fmt.Sprintf("is not a ClusterConfig field (kairos-capi checks against the fields of k0s %s, and k0s refuses unknown fields)", K0sSchemaVersion)})
				continue
			}
			child.check(m[k], joinPath(path, k), out)
		}
		return
	case k0sList:
		l, ok := v.([]any)
		if !ok {
			add("must be a list, not %s", describeValue(v))
			return
		}
		for i, item := range l {
			f.elem.check(item, fmt.Sprintf("%s[%d]", path, i), out)
		}
		return
	case k0sMap:
		m, ok := v.(map[string]any)
		if !ok {
			add("must be a mapping, not %s", describeValue(v))
			return
		}
		for _, k := range sortedKeys(m) {
			f.elem.check(m[k], joinPath(path, k), out)
		}
		return
	}
	var ok bool
	switch f.kind {
	case k0sString:
		_, ok = v.(string)
		if !ok {
			add("must be a string, not %s (quote it)", describeValue(v))
		}
	case k0sInt:
		_, ok = v.(int)
		if !ok {
			add("must be a whole number, not %s", describeValue(v))
		}
	case k0sBool:
		_, ok = v.(bool)
		if !ok {
			add("must be true or false, not %s", describeValue(v))
		}
	case k0sDuration:
		s, isStr := v.(string)
		if !isStr {
			add("must be a duration such as 8760h, not %s", describeValue(v))
			return
		}
		if _, err := time.ParseDuration(s); err != nil {
			add("%q is not a duration such as 8760h", s)
		}
		return
	case k0sScalar:
		switch v.(type) {
		case map[string]any, []any:
			add("must be a single value, not %s", describeValue(v))
		}
		return
	}
	if ok && f.valid != nil {
		if msg := f.valid(v); msg != "" {
			add("%s", msg)
		}
	}
}

func describeValue(v any) string {
	switch t := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", t)
	default:
		return fmt.Sprintf("%v", t)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}
