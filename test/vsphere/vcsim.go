// Package vsphere runs the real Cluster API vSphere provider (CAPV) in tests: govmomi's
// in-process vCenter simulator (vcsim, VPX model) with a Kairos VM template, CAPV's unmodified
// manager binary (hack/capv-manager.sh) against a test/harness management cluster with CAPV's
// shipped RBAC, and a guest bridge (Bridge) that does what a Kairos VM does when CAPV powers
// it on: it boots a simulated Kairos node (test/simnode) from the VM's guestinfo and reports
// what VMware Tools would through vcsim.
//
// File references in comments are to the module cache: CAPV/ is
// sigs.k8s.io/cluster-api-provider-vsphere@v1.16.1, GOVMOMI/ is github.com/vmware/govmomi@v0.53.0,
// YIP/ is github.com/mudler/yip@v1.25.1. docs/capv-on-vcsim.md has the facts they establish.
package vsphere

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"time"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator" // registers the REST (tagging) endpoints CAPV logs into
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// TemplateName is the VM template of a Kairos image in the simulated vCenter; NextTemplateName
// is a second one, as an administrator imports the OVA of the next Kairos release next to the
// first: what a rolling upgrade through a new VSphereMachineTemplate clones.
const (
	TemplateName     = "kairos-template"
	NextTemplateName = "kairos-template-next"
)

// The VPX model's inventory (GOVMOMI/simulator/model.go names), as a VSphereMachine or the
// vSphere flavor's variables name it.
const (
	Datacenter   = "DC0"
	Datastore    = "LocalDS_0"
	Network      = "VM Network"
	Folder       = "/DC0/vm"
	ResourcePool = "/DC0/host/DC0_C0/Resources"
)

// VCSim is a running in-process vCenter simulator.
type VCSim struct {
	Model      *simulator.Model
	Server     *simulator.Server
	Host       string // host:port, as VSphereCluster.spec.server
	Thumbprint string // SHA-256 (config/templates/README.md tells users to take that one), as VSphereCluster.spec.thumbprint
	Version    string // the simulated vCenter's About.Version
	User, Pass string // the credentials of the server URL
	// Client is logged in: the guest side (Bridge) and tests use it.
	Client *vim25.Client
	Finder *find.Finder // in the default datacenter
}

// Stop closes the simulator. vcsim's server, like httptest's, waits for requests in flight, and
// a property collector's WaitForUpdates of CAPV's manager (stopped before) may never end: give
// it a few seconds, then leave it to the process' exit.
func (v *VCSim) Stop() {
	if v.Client != nil {
		_ = session.NewManager(v.Client).Logout(context.Background())
	}
	done := make(chan struct{})
	go func() {
		v.Server.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "vsphere: vcsim did not close within 5s (a request in flight); leaving it to the exit")
	}
	v.Model.Remove() // its datastores' folder (govcsim-* in TMPDIR)
}

// StartVCSim starts a VPX (vCenter) model listening on 127.0.0.1 with TLS and the REST
// endpoints, and turns its two VMs into powered-off templates named TemplateName and
// NextTemplateName. The
// model and server set-up follows govmomi's simulator package (simulator/model.go VPX,
// simulator/simulator.go Service.NewServer) and CAPV's own test helper
// (internal/test/helpers/vcsim/builder.go: TLS, RegisterEndpoints, vapi/simulator import).
func StartVCSim(ctx context.Context) (*VCSim, error) {
	model := simulator.VPX()
	model.ClusterHost = 1 // one host in the cluster
	model.Host = 0        // no standalone host
	model.Machine = 2     // two VMs per resource pool: they become the templates
	if err := model.Create(); err != nil {
		return nil, err
	}
	model.Service.Listen = &url.URL{Host: "127.0.0.1:0"}
	model.Service.TLS = new(tls.Config)
	model.Service.RegisterEndpoints = true
	server := model.Service.NewServer()
	v := &VCSim{Model: model, Server: server, Host: server.URL.Host}
	v.User = server.URL.User.Username()
	v.Pass, _ = server.URL.User.Password()
	if cert := server.Certificate(); cert != nil {
		v.Thumbprint = soap.ThumbprintSHA256(cert)
	}

	c, err := vim25.NewClient(ctx, soap.NewClient(server.URL, true))
	if err != nil {
		v.Stop()
		return nil, err
	}
	v.Version = c.ServiceContent.About.Version
	if err := session.NewManager(c).Login(ctx, server.URL.User); err != nil {
		v.Stop()
		return nil, err
	}
	v.Client = c
	v.Finder = find.NewFinder(c)
	dc, err := v.Finder.DefaultDatacenter(ctx)
	if err != nil {
		v.Stop()
		return nil, err
	}
	v.Finder.SetDatacenter(dc)
	vms, err := v.Finder.VirtualMachineList(ctx, "*")
	if err != nil || len(vms) != 2 {
		v.Stop()
		return nil, fmt.Errorf("the VPX model's VMs: %d, %v; want 2", len(vms), err)
	}
	for i, name := range []string{TemplateName, NextTemplateName} {
		if err := v.makeTemplate(ctx, vms[i], name); err != nil {
			v.Stop()
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
	}
	return v, nil
}

// makeTemplate powers off one of the model's VMs, renames it and marks it a template, as an
// imported Kairos OVA would be.
func (v *VCSim) makeTemplate(ctx context.Context, vm *object.VirtualMachine, name string) error {
	if state, err := vm.PowerState(ctx); err == nil && state == types.VirtualMachinePowerStatePoweredOn {
		task, err := vm.PowerOff(ctx)
		if err != nil {
			return err
		}
		if err := task.Wait(ctx); err != nil {
			return err
		}
	}
	task, err := vm.Rename(ctx, name)
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil {
		return err
	}
	if err := vm.MarkAsTemplate(ctx); err != nil {
		return err
	}
	// Replace the template in vcsim's registry by the same object with a corrected
	// CloneVM_Task (same reference), as govmomi's simulator/example_extend_test.go extends VMs.
	tpl, ok := v.Model.Map().Get(vm.Reference()).(*simulator.VirtualMachine)
	if !ok {
		return fmt.Errorf("template %s is not a simulator VirtualMachine", vm.Reference())
	}
	v.Model.Map().Put(&cloneSpecTemplate{tpl})
	return nil
}

// cloneSpecTemplate is a vcsim template whose clones get the extraConfig, instanceUuid, numCPUs
// and memoryMB of the clone spec, as on a real vCenter. vcsim v0.53.0 (and v0.54.0) drops them: CloneVMTask (simulator/
// virtual_machine.go) copies spec.config's extraConfig, uuid, instanceUuid, numCPUs and memoryMB
// into a copy of the new VM's config spec ("dst, src := config, req.Spec.Config" copies the
// struct), so CreateVM never sees them. CAPV puts the bootstrap data there
// (pkg/services/govmomi/vcenter/clone.go: guestinfo.userdata) and the VSphereVM's UID as
// instanceUuid, and the VSphereMachine's numCPUs and memoryMiB as numCPUs and memoryMB; without
// this the clone has none of them (CAPV then finds the VM by inventory path, and every clone has
// the template's hardware, so a new VSphereMachineTemplate with other hardware changes nothing
// one could see in vCenter).
type cloneSpecTemplate struct {
	*simulator.VirtualMachine
}

// CloneVMTask runs vcsim's clone, then sets what it dropped on the clone before the task the
// client waits for completes.
func (t *cloneSpecTemplate) CloneVMTask(ctx *simulator.Context, req *types.CloneVM_Task) soap.HasFault {
	res := t.VirtualMachine.CloneVMTask(ctx, req)
	spec := req.Spec.Config
	body, ok := res.(*methods.CloneVM_TaskBody)
	if spec == nil || !ok || body.Res == nil {
		return res
	}
	inner, ok := ctx.Map.Get(body.Res.Returnval).(*simulator.Task)
	if !ok {
		return res
	}
	outer := simulator.CreateTask(t.Self, "cloneVm", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		inner.Wait()
		if inner.Info.Error != nil {
			return nil, inner.Info.Error.Fault
		}
		ref, ok := inner.Info.Result.(types.ManagedObjectReference)
		if !ok {
			return nil, &types.InvalidState{}
		}
		clone, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine)
		if !ok {
			return nil, &types.ManagedObjectNotFound{Obj: ref}
		}
		ctx.WithLock(clone, func() {
			var changes []types.PropertyChange
			if len(spec.ExtraConfig) > 0 {
				extra := append([]types.BaseOptionValue{}, clone.Config.ExtraConfig...)
				extra = append(extra, spec.ExtraConfig...)
				changes = append(changes, types.PropertyChange{Name: "config.extraConfig", Val: extra})
			}
			if spec.InstanceUuid != "" {
				changes = append(changes,
					types.PropertyChange{Name: "config.instanceUuid", Val: spec.InstanceUuid},
					types.PropertyChange{Name: "summary.config.instanceUuid", Val: spec.InstanceUuid})
			}
			if spec.NumCPUs != 0 {
				changes = append(changes,
					types.PropertyChange{Name: "config.hardware.numCPU", Val: spec.NumCPUs},
					types.PropertyChange{Name: "summary.config.numCpu", Val: spec.NumCPUs})
			}
			if spec.MemoryMB != 0 {
				changes = append(changes,
					types.PropertyChange{Name: "config.hardware.memoryMB", Val: int32(spec.MemoryMB)},
					types.PropertyChange{Name: "summary.config.memorySizeMB", Val: int32(spec.MemoryMB)})
			}
			if len(changes) > 0 {
				ctx.Update(clone, changes)
			}
		})
		return ref, nil
	})
	return &methods.CloneVM_TaskBody{Res: &types.CloneVM_TaskResponse{Returnval: outer.Run(ctx)}}
}

// VM returns the VM of that name and the properties the guest side reads, or nil when it does
// not exist (yet).
func (v *VCSim) VM(ctx context.Context, name string) (*object.VirtualMachine, *mo.VirtualMachine, error) {
	vm, err := v.Finder.VirtualMachine(ctx, name)
	if err != nil {
		var nf *find.NotFoundError
		if errors.As(err, &nf) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var props mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.extraConfig", "config.uuid", "config.hardware.memoryMB", "config.hardware.numCPU", "runtime.powerState", "guest.net"}, &props); err != nil {
		return nil, nil, err
	}
	if props.Config == nil {
		return nil, nil, nil // still being created
	}
	return vm, &props, nil
}

// VMNames returns the names of the VMs (templates included) whose names match pattern (an
// inventory path pattern such as "kairos-k0s-*"), sorted; none is no error.
func (v *VCSim) VMNames(ctx context.Context, pattern string) ([]string, error) {
	vms, err := v.Finder.VirtualMachineList(ctx, pattern)
	if err != nil {
		var nf *find.NotFoundError
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the VMs %s: %w", pattern, err)
	}
	names := make([]string, 0, len(vms))
	for _, vm := range vms {
		names = append(names, vm.Name())
	}
	sort.Strings(names)
	return names, nil
}

// DestroyVM deletes a VM as a vCenter administrator does (vSphere Client "Delete from Disk"):
// powered off first, since vCenter refuses to destroy a running VM, then destroyed, its files
// with it. Nothing of Cluster API is told.
func (v *VCSim) DestroyVM(ctx context.Context, name string) error {
	vm, props, err := v.VM(ctx, name)
	if err != nil {
		return err
	}
	if vm == nil {
		return fmt.Errorf("no VM %s in vcsim", name)
	}
	if props.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
		task, err := vm.PowerOff(ctx)
		if err == nil {
			err = task.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("powering VM %s off: %w", name, err)
		}
	}
	task, err := vm.Destroy(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("destroying VM %s: %w", name, err)
	}
	return nil
}
