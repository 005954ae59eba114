package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// VSphereVMGVK is CAPV's VSphereVM kind, which names each VM CAPV clones.
var VSphereVMGVK = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta2", Kind: "VSphereVM"}

// BridgeOptions configure a Bridge.
type BridgeOptions struct {
	// VCSim is the simulated vCenter whose VMs the bridge plays.
	VCSim *VCSim
	// Registry starts the simulated Kairos nodes. Its AddressPrefix must not be loopback:
	// CAPV drops loopback addresses.
	Registry *simnode.Registry
	// Client reads the management cluster. A VM does not know which Cluster it belongs to;
	// the simulation needs the cluster's endpoint to tell a node's document served the right
	// one (simnode.NodeSpec.Endpoint): the bridge reads it from the Cluster of the VM's
	// VSphereVM, as the network a real VM is on would route the address.
	Client client.Client
	// Interval between two looks at the simulated vCenter. Default 500ms.
	Interval time.Duration
	// Logger receives what the bridge does.
	Logger logr.Logger
}

// Bridge does, for each VM of a simulated vCenter, what the VM's guest would: when CAPV powers
// a VM on, a simulated Kairos node boots from the VM's guestinfo with the VM's identity, and
// VMware Tools report its address and hostname to vcsim; when the VM is powered off or
// destroyed, the node stops.
//
// It polls vcsim instead of waiting on a property collector: each round is one
// RetrieveProperties of every VM through a container view (GOVMOMI/view/container_view.go),
// level-triggered as a controller's resync, so a VM that appeared and disappeared between two
// rounds, or a round that failed, leaves nothing behind; and stopping never waits on a
// WaitForUpdatesEx that vcsim may not end (docs/capv-on-vcsim.md, "Stopping"). Half a second
// is nothing next to CAPV's own requeues (10 s while a VM has no address).
type Bridge struct {
	o      BridgeOptions
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	guests map[types.ManagedObjectReference]*guest
	// events are what happened, in order, for test messages.
	events []string
}

// guest is one powered-on VM's guest.
type guest struct {
	vm         types.ManagedObjectReference
	name       string // the VM's name
	uuid       string // the VM's BIOS UUID (config.uuid)
	mac        string // the MAC of its first NIC
	node       *simnode.Node
	refused    error  // why no node boots (user data that does not decode)
	hostname   string // metadata's local-hostname
	reportedIP string // what Tools last reported
}

// GuestStatus is what the bridge knows of a VM's guest.
type GuestStatus struct {
	// Node is the simulated Kairos node the VM runs, or nil.
	Node *simnode.Node
	// Refused says why the VM runs no node although it is powered on (its user data does not
	// decode), nil otherwise.
	Refused error
	// UUID is the VM's BIOS UUID, MAC its first NIC's.
	UUID, MAC string
	// MetadataHostname is guestinfo.metadata's local-hostname.
	MetadataHostname string
	// ReportedIP is the address VMware Tools reported to vcsim, empty before.
	ReportedIP string
}

// StartBridge starts playing the guests of the simulated vCenter's VMs. Stop it before the
// registry and the simulator.
func StartBridge(ctx context.Context, o BridgeOptions) (*Bridge, error) {
	if o.Interval == 0 {
		o.Interval = 500 * time.Millisecond
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	o.Logger = o.Logger.WithName("vsphere-bridge")
	v, err := view.NewManager(o.VCSim.Client).CreateContainerView(ctx, o.VCSim.Client.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, fmt.Errorf("creating a container view of the VMs: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bridge{o: o, cancel: cancel, done: make(chan struct{}), guests: map[types.ManagedObjectReference]*guest{}}
	go func() {
		defer close(b.done)
		defer func() { _ = v.Destroy(context.Background()) }()
		for {
			if err := b.round(ctx, v); err != nil && ctx.Err() == nil {
				b.o.Logger.Error(err, "Looking at the simulated vCenter")
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.Interval):
			}
		}
	}()
	return b, nil
}

// Stop stops the bridge and every node it started.
func (b *Bridge) Stop() {
	b.cancel()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	for ref, g := range b.guests {
		if g.node != nil {
			b.o.Registry.StopNode(g.node.ProviderID())
		}
		delete(b.guests, ref)
	}
}

// Guest returns the status of the guest of the VM of that name; ok is false when the VM is not
// powered on (or does not exist).
func (b *Bridge) Guest(name string) (GuestStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range b.guests {
		if g.name == name {
			return GuestStatus{Node: g.node, Refused: g.refused, UUID: g.uuid, MAC: g.mac,
				MetadataHostname: g.hostname, ReportedIP: g.reportedIP}, true
		}
	}
	return GuestStatus{}, false
}

// Events returns what the bridge did, in order.
func (b *Bridge) Events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...)
}

func (b *Bridge) event(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.o.Logger.Info(msg)
	b.mu.Lock()
	b.events = append(b.events, time.Now().UTC().Format("15:04:05.000")+" "+msg)
	b.mu.Unlock()
}

// vmProperties are what a round reads of every VM.
var vmProperties = []string{"name", "config.template", "config.uuid", "config.extraConfig", "config.hardware.device", "runtime.powerState", "guest.net"}

// round looks at every VM once: boots the guests of VMs powered on since the last round,
// stops those of VMs powered off or gone, and reports the addresses of running guests.
func (b *Bridge) round(ctx context.Context, v *view.ContainerView) error {
	var vms []mo.VirtualMachine
	if err := v.Retrieve(ctx, []string{"VirtualMachine"}, vmProperties, &vms); err != nil {
		return fmt.Errorf("retrieving the VMs: %w", err)
	}
	on := map[types.ManagedObjectReference]*mo.VirtualMachine{}
	for i := range vms {
		vm := &vms[i]
		if vm.Config == nil || vm.Config.Template {
			continue // being created, or a template (never powered on)
		}
		if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			on[vm.Self] = vm
		}
	}

	// Powered off, suspended or destroyed: the machine is gone, so is its node.
	b.mu.Lock()
	var gone []*guest
	for ref, g := range b.guests {
		if on[ref] == nil {
			gone = append(gone, g)
			delete(b.guests, ref)
		}
	}
	b.mu.Unlock()
	for _, g := range gone {
		if g.node != nil {
			b.o.Registry.StopNode(g.node.ProviderID())
			b.event("VM %s is no longer powered on: stopped its node %s", g.name, g.node.ProviderID())
		}
	}

	refs := make([]types.ManagedObjectReference, 0, len(on))
	for ref := range on {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Value < refs[j].Value })
	var errs []error
	for _, ref := range refs {
		vm := on[ref]
		b.mu.Lock()
		g := b.guests[ref]
		b.mu.Unlock()
		if g == nil {
			var err error
			if g, err = b.boot(ctx, vm); err != nil {
				errs = append(errs, fmt.Errorf("VM %s: %w", vm.Name, err))
				continue // booted again next round
			}
			b.mu.Lock()
			b.guests[ref] = g
			b.mu.Unlock()
		}
		if err := b.reportTools(ctx, g, vm); err != nil {
			errs = append(errs, fmt.Errorf("VM %s: %w", vm.Name, err))
		}
	}
	return errors.Join(errs...)
}

// boot does what a Kairos VM does at power-on: its datasource reads the guestinfo, and the
// node boots the user data with the VM's identity. An error is a failure of the simulation
// (retried next round); user data the guest cannot read is no error but a guest that runs no
// node (GuestStatus.Refused).
func (b *Bridge) boot(ctx context.Context, vm *mo.VirtualMachine) (*guest, error) {
	g := &guest{vm: vm.Self, name: vm.Name, uuid: strings.ToLower(vm.Config.Uuid), mac: firstMAC(vm)}
	data, err := readGuestData(extraConfig(vm.Config.ExtraConfig))
	if err != nil {
		g.refused = err
		b.event("VM %s (BIOS UUID %s) powered on; its Kairos datasource finds no user data it can read, so it boots without any cloud-config and never starts Kubernetes: %v", vm.Name, g.uuid, err)
		return g, nil
	}
	files := map[string]string{UserDataPath: string(data.userData)}
	if data.metadataErr == nil {
		files[MetadataPath] = string(data.metadata)
		var md struct {
			LocalHostname string `json:"local-hostname"`
		}
		if err := yaml.Unmarshal(data.metadata, &md); err != nil {
			return nil, fmt.Errorf("guestinfo.metadata is no YAML CAPV writes: %w", err)
		}
		g.hostname = md.LocalHostname
	} else {
		b.event("VM %s: %v (Kairos' datasource logs it and writes no %s)", vm.Name, data.metadataErr, MetadataPath)
	}
	namespace, endpoint, err := b.clusterOf(ctx, vm.Name, g.uuid)
	if err != nil {
		return nil, err
	}
	node, err := b.o.Registry.StartNode(simnode.NodeSpec{
		Namespace: namespace,
		// The node name when the document sets no hostname: the machine's name, as for the
		// lifecycle tests' machines, never the metadata's local-hostname, which Kairos does not
		// apply (yip's VMware provider writes no hostname file, which is what
		// YIP/pkg/plugins/datasource.go would apply). Kairos-capi's documents set the hostname;
		// the tests check it agrees with the local-hostname CAPV expects.
		Name: vm.Name,
		// The registry's key for the machine, as CAPV spells it (CAPV/pkg/util/machines.go
		// ConvertUUIDToProviderID). The node does not know it: its Node gets what its
		// document gives it.
		ProviderID: "vsphere://" + g.uuid,
		SystemUUID: g.uuid,
		Files:      files,
		Endpoint:   endpoint,
		// vSphere has no load balancer: the endpoint is the control plane's virtual IP.
		EndpointIsVIP: true,
		Data:          data.userData,
	})
	if err != nil {
		return nil, fmt.Errorf("starting its node: %w", err)
	}
	g.node = node
	b.event("VM %s (BIOS UUID %s, MAC %s) powered on: booting its Kairos node at %s for the cluster at %s", vm.Name, g.uuid, g.mac, node.IP(), endpoint)
	return g, nil
}

// clusterOf finds the namespace and the control-plane endpoint of the Cluster of the VSphereVM
// that names the VM (CAPV names the VM after its VSphereVM and copies the BIOS UUID to
// spec.biosUUID once the clone exists).
func (b *Bridge) clusterOf(ctx context.Context, vmName, uuid string) (namespace, endpoint string, err error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(VSphereVMGVK.GroupVersion().WithKind(VSphereVMGVK.Kind + "List"))
	if err := b.o.Client.List(ctx, list); err != nil {
		return "", "", fmt.Errorf("listing the VSphereVMs: %w", err)
	}
	var found *unstructured.Unstructured
	for i := range list.Items {
		item := &list.Items[i]
		bios, _, _ := unstructured.NestedString(item.Object, "spec", "biosUUID")
		if strings.EqualFold(bios, uuid) || (bios == "" && item.GetName() == vmName) {
			found = item
			break
		}
	}
	if found == nil {
		return "", "", fmt.Errorf("no VSphereVM names it")
	}
	clusterName := found.GetLabels()[clusterv1.ClusterNameLabel]
	cluster := &clusterv1.Cluster{}
	if err := b.o.Client.Get(ctx, client.ObjectKey{Namespace: found.GetNamespace(), Name: clusterName}, cluster); err != nil {
		return "", "", fmt.Errorf("reading the Cluster %q of VSphereVM %s: %w", clusterName, found.GetName(), err)
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return "", "", fmt.Errorf("the Cluster %s has no control-plane endpoint yet", cluster.Name)
	}
	return found.GetNamespace(), net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))), nil
}

// reportTools does what VMware Tools in a running Kairos VM do (kairos-init starts vmtoolsd on
// VMware): report the guest's address, hostname and that Tools run. vcsim applies a
// ReconfigVM extraConfig key "SET.<property path>" to the VM's properties instead of storing it
// (GOVMOMI/simulator/virtual_machine.go applyExtraConfig): SET.guest.ipAddress also sets
// guest.net[0].ipAddress, the first NIC's entry, which is where CAPV looks for it: it takes the
// addresses of the guest.net entry whose MAC is a NIC's (CAPV/pkg/services/govmomi/net/net.go
// GetNetworkStatus). Only the first NIC is reported; the flavor has one.
//
// A guest whose node stalls before its agents start (simnode.Node.AddressesHidden), or that runs
// no node at all, reports nothing: CAPV then waits for an address, as with a VM without Tools.
func (b *Bridge) reportTools(ctx context.Context, g *guest, vm *mo.VirtualMachine) error {
	if g.node == nil || g.node.AddressesHidden() {
		return nil
	}
	ip := g.node.IP()
	if g.reportedIP == ip && guestNetHas(vm, g.mac, ip) {
		return nil
	}
	if len(vm.Guest.Net) == 0 || !strings.EqualFold(vm.Guest.Net[0].MacAddress, g.mac) {
		return fmt.Errorf("vcsim's first guest.net entry is not the first NIC's (%s): SET.guest.ipAddress would report the address on another NIC", g.mac)
	}
	hostname := g.node.Name()
	if hostname == "" {
		hostname = g.node.Spec().Name
	}
	task, err := object.NewVirtualMachine(b.o.VCSim.Client, vm.Self).Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: []types.BaseOptionValue{
		&types.OptionValue{Key: "SET.guest.ipAddress", Value: ip},
		&types.OptionValue{Key: "SET.guest.hostName", Value: hostname},
		&types.OptionValue{Key: "SET.guest.toolsRunningStatus", Value: string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)},
		&types.OptionValue{Key: "SET.guest.toolsStatus", Value: string(types.VirtualMachineToolsStatusToolsOk)},
		&types.OptionValue{Key: "SET.guest.guestState", Value: "running"},
	}})
	if err != nil {
		return fmt.Errorf("reporting the guest's address through vcsim: %w", err)
	}
	if err := task.Wait(ctx); err != nil {
		return fmt.Errorf("reporting the guest's address through vcsim: %w", err)
	}
	b.mu.Lock()
	g.reportedIP = ip
	b.mu.Unlock()
	b.event("VM %s: VMware Tools report %s on NIC %s, hostname %s", g.name, ip, g.mac, hostname)
	return nil
}

// firstMAC is the MAC address of the VM's first virtual NIC.
func firstMAC(vm *mo.VirtualMachine) string {
	if vm.Config == nil {
		return ""
	}
	for _, d := range vm.Config.Hardware.Device {
		if nic, ok := d.(types.BaseVirtualEthernetCard); ok {
			return nic.GetVirtualEthernetCard().MacAddress
		}
	}
	return ""
}

func guestNetHas(vm *mo.VirtualMachine, mac, ip string) bool {
	if vm.Guest == nil {
		return false
	}
	for _, n := range vm.Guest.Net {
		if strings.EqualFold(n.MacAddress, mac) {
			for _, a := range n.IpAddress {
				if a == ip {
					return true
				}
			}
		}
	}
	return false
}
