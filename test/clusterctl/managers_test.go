package clusterctl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"

	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// managerProcess is a provider manager running as a local process in place of the Deployment
// clusterctl installed.
type managerProcess struct {
	*framework.Process
	provider providerSpec
	// User is the identity the API server sees (the Deployment's ServiceAccount).
	User string
	// Kubeconfig is the process' kubeconfig (impersonating User).
	Kubeconfig string
	stopped    bool
}

// startManager runs a provider's manager binary the way its installed Deployment would run it:
// same args (after clusterctl's variable substitution), same ServiceAccount (impersonated),
// its webhook configurations pointed at the process. It stops the process when the test ends
// and fails the test if the process' output says "forbidden".
func (m *management) startManager(t *testing.T, p providerSpec) *managerProcess {
	t.Helper()
	return m.startManagerUntil(t, t, p)
}

// startManagerUntil is startManager for a subtest whose manager outlives it: the process runs
// until owner ends.
func (m *management) startManagerUntil(t *testing.T, owner *testing.T, p providerSpec) *managerProcess {
	t.Helper()
	return m.startManagerBuild(t, owner, p, "")
}

// startManagerBuild is startManagerUntil with the manager built as the given version (stamped
// as a release build stamps it) instead of the installed one; "" is the installed one.
func (m *management) startManagerBuild(t *testing.T, owner *testing.T, p providerSpec, version string) *managerProcess {
	t.Helper()
	ctx := context.Background()
	// The binary of the version clusterctl installed, as a Deployment runs its image.
	if version == "" {
		version = m.providers(t)[p.Namespace+"/"+p.Label].Version
	}
	bin, err := managerBinary(p, version)
	if err != nil {
		t.Fatal(err)
	}

	deployments := &appsv1.DeploymentList{}
	if err := m.Client.List(ctx, deployments, client.InNamespace(p.Namespace), client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}); err != nil {
		t.Fatal(err)
	}
	if len(deployments.Items) != 1 {
		t.Fatalf("%s: want one Deployment of %s in %s, found %d", m.Name, p.Label, p.Namespace, len(deployments.Items))
	}
	d := deployments.Items[0]
	container := managerContainer(&d)
	if container == nil {
		t.Fatalf("Deployment %s/%s has no container named manager", d.Namespace, d.Name)
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		t.Fatalf("Deployment %s/%s sets no serviceAccountName: it would run as the namespace's default ServiceAccount", d.Namespace, d.Name)
	}
	user := "system:serviceaccount:" + d.Namespace + ":" + sa
	kubeconfig, err := m.Env.ImpersonatingKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(m.dir, p.Name+".kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}

	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = framework.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	webhookPort, healthPort, diagnosticsPort := ports[0], ports[1], ports[2]
	m.pointWebhooks(t, p.Label, webhookPort)

	// The shipped args first; later flags win, so the local overrides come last.
	args := append([]string{}, container.Args...)
	args = append(args,
		"--kubeconfig="+kubeconfigPath,
		"--leader-elect=false",
		"--webhook-port="+strconv.Itoa(webhookPort),
		"--webhook-cert-dir="+m.certDir,
		"--health-addr=127.0.0.1:"+strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:"+strconv.Itoa(diagnosticsPort),
	)
	env := []string{"KUBECONFIG="}
	for _, e := range container.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				env = append(env, e.Name+"="+d.Namespace)
			case "metadata.name":
				env = append(env, e.Name+"="+d.Name+"-local")
			case "metadata.uid":
				env = append(env, e.Name+"="+string(uuid.NewUUID()))
			}
		}
	}

	logPath := filepath.Join(m.dir, p.Name+".log")
	for i := 1; ; i++ { // a restarted manager gets a new log
		if _, err := os.Stat(logPath); errors.Is(err, os.ErrNotExist) {
			break
		}
		logPath = filepath.Join(m.dir, fmt.Sprintf("%s.%d.log", p.Name, i))
	}
	proc, err := framework.StartProcess(m.Name+"/"+p.Name, logPath, env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	mp := &managerProcess{Process: proc, provider: p, User: user, Kubeconfig: kubeconfigPath}
	owner.Cleanup(func() { mp.stop(owner) })

	// Ready: the webhook server serves (the readiness check) and the health endpoint answers.
	readyz := "http://127.0.0.1:" + strconv.Itoa(healthPort) + "/readyz"
	deadline := time.Now().Add(time.Minute)
	for {
		if exited, err := mp.Exited(); exited {
			t.Fatalf("%s exited during start-up (%v):\n%s", mp.Name, err, mp.Output())
		}
		resp, err := http.Get(readyz) //nolint:gosec,noctx // local probe
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 1m (%s: %v):\n%s", mp.Name, readyz, err, mp.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s: %s manager %s running as %s (args %s)", m.Name, p.Name, version, user, strings.Join(container.Args, " "))
	return mp
}

// managerStopGrace is how long a manager may take to stop after SIGTERM: controller-runtime's
// graceful shutdown timeout (30 s) and some.
const managerStopGrace = 45 * time.Second

// stop ends the process (idempotent) and fails the test if its output shows a request the
// API server refused for lack of permissions, or the process failed.
func (mp *managerProcess) stop(t *testing.T) {
	t.Helper()
	if mp.stopped {
		return
	}
	mp.stopped = true
	// controller-runtime gives its runnables up to 30 s (GracefulShutdownTimeout's default) to
	// end after SIGTERM: a manager that needs them on a loaded machine still stops as designed.
	if err := mp.Stop(managerStopGrace); err != nil {
		t.Errorf("%s: %v", mp.Name, err)
	}
	out := mp.Output()
	if lines := forbiddenLines(out); len(lines) > 0 {
		t.Errorf("%s (as %s) was refused requests: the shipped RBAC is missing permissions:\n%s", mp.Name, mp.User, strings.Join(lines, "\n"))
	}
	if t.Failed() || os.Getenv("KAIROS_TEST_LOG") != "" {
		t.Logf("output of %s (%s):\n%s", mp.Name, mp.LogPath, tail(out, 200))
	}
}

// checkRunning fails the test if the process has ended.
func (mp *managerProcess) checkRunning(t *testing.T) {
	t.Helper()
	if exited, err := mp.Exited(); exited {
		t.Fatalf("%s exited (%v):\n%s", mp.Name, err, tail(mp.Output(), 200))
	}
}

var forbidden = regexp.MustCompile(`(?i)forbidden`)

func forbiddenLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if forbidden.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func managerContainer(d *appsv1.Deployment) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "manager" {
			return c
		}
	}
	return nil
}

// pointWebhooks points a provider's installed webhooks at a local server on port.
func (m *management) pointWebhooks(t *testing.T, label string, port int) {
	t.Helper()
	if err := clusterctlrepo.PointWebhooks(context.Background(), m.Client, label, port, m.caBundle, nil); err != nil {
		t.Fatalf("%s: %v", m.Name, err)
	}
}

// serveCoreWebhooks serves Cluster API's admission webhooks for its core types in this
// process (with administrator rights: the core provider is not under test) behind the
// installed core webhook configurations, so that Clusters and Machines are defaulted and
// validated as in a real management cluster.
func (m *management) serveCoreWebhooks(t *testing.T) {
	t.Helper()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(m.Env.Config, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 framework.Logger(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: m.certDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]interface{ SetupWebhookWithManager(ctrl.Manager) error }{
		"Cluster":            &coreadmission.Cluster{Client: mgr.GetClient()},
		"ClusterClass":       &coreadmission.ClusterClass{Client: mgr.GetClient()},
		"Machine":            &coreadmission.Machine{},
		"MachineSet":         &coreadmission.MachineSet{},
		"MachineDeployment":  &coreadmission.MachineDeployment{},
		"MachineHealthCheck": &coreadmission.MachineHealthCheck{},
		"MachineDrainRule":   &coreadmission.MachineDrainRule{},
	} {
		if err := w.SetupWebhookWithManager(mgr); err != nil {
			t.Fatalf("%s webhook: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("core webhooks of %s: %v", m.Name, err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	framework.Eventually(t, 30*time.Second, func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err != nil {
			return err
		}
		return conn.Close()
	})
	m.pointWebhooks(t, "cluster-api", port)
}
