package kairosconfig

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/syntax"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// reconcileExistingData finds bootstrap data that already exists. The data is write-once:
// a node may already have consumed it, so it is never rendered again.
func (r *Reconciler) reconcileExistingData(ctx context.Context, s *scope) (ctrl.Result, error) {
	key := client.ObjectKey{Namespace: s.config.Namespace, Name: s.config.Name}
	secret := &corev1.Secret{}
	// Read from the cache only. A Secret created moments ago that the cache has not seen yet is
	// caught where the data is stored: the create is answered AlreadyExists and the next
	// reconcile takes that Secret. Asking the API server here would cost every new config an
	// uncached read answered 404.
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil:
		if err := r.adoptDataSecret(ctx, s, secret); err != nil {
			return ctrl.Result{}, err
		}
		res, err := r.refreshJoinToken(ctx, s, secret)
		if err != nil {
			return ctrl.Result{}, err
		}
		published := ptr.Deref(s.config.Status.Initialization.DataSecretCreated, false) || s.owner.dataSecretName() != ""
		if !published && secret.Annotations[bootstrapv1.TokenIDAnnotation] != "" && s.owner.needsJoinToken() &&
			(s.joinToken == nil || s.joinToken.Status != metav1.ConditionTrue) {
			// Stored, but its token is not known to exist (the manager stopped between the two,
			// or the workload cluster did not answer): no node gets data it cannot join with.
			msg := "the join token of the stored bootstrap data is not registered yet, retrying"
			if s.joinToken != nil {
				msg = s.joinToken.Message
			}
			s.wait(bootstrapv1.WaitingForJoinTokenReason, "%s", msg)
			return util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: notConnectedRequeue}), nil
		}
		s.dataSecretName = secret.Name
		s.stop()
		return util.LowestNonZeroResult(res, r.reconcileNodeProviderID(ctx, s)), nil
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("reading bootstrap data Secret: %w", err)
	}

	// Status does not survive clusterctl move or a backup restore, but the Machine still
	// names the data its node consumed: trust it rather than rendering new data.
	if name := s.owner.dataSecretName(); name != "" {
		s.dataSecretName = name
		s.stop()
		return ctrl.Result{}, nil
	}
	if ptr.Deref(s.config.Status.Initialization.DataSecretCreated, false) {
		s.wait(bootstrapv1.DataSecretCreationFailedReason,
			"bootstrap data Secret %s was deleted after it was created; it is not rendered again because the node may already use it: delete the %s to replace the node",
			key.Name, s.owner.kind())
	}
	return ctrl.Result{}, nil
}

// adoptDataSecret makes sure the data Secret is controlled by its KairosConfig; a restore from
// backup can bring the Secret back without its owner reference.
func (r *Reconciler) adoptDataSecret(ctx context.Context, s *scope, secret *corev1.Secret) error {
	if metav1.IsControlledBy(secret, s.config) {
		return nil
	}
	if owner := metav1.GetControllerOf(secret); owner != nil {
		return fmt.Errorf("secret %s is controlled by %s %s, not by this KairosConfig: rename one of them", secret.Name, owner.Kind, owner.Name)
	}
	patch := client.MergeFrom(secret.DeepCopy())
	secret.OwnerReferences = append(secret.OwnerReferences, *metav1.NewControllerRef(s.config, bootstrapv1.GroupVersion.WithKind("KairosConfig")))
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return fmt.Errorf("adopting bootstrap data Secret %s: %w", secret.Name, err)
	}
	return nil
}

// refreshJoinToken keeps the generated k0s token inside existing data usable while a node may
// still join with it (see JoinTokenAvailableCondition); once no node needs it, it is left to
// expire. A token that no longer exists in the workload cluster (it expired while this
// controller was down and the token cleaner removed it, or someone deleted it) is re-created
// with the ID and secret the data holds: the data is write-once, and a MachinePool hands the
// same data to every node it adds, at any time.
func (r *Reconciler) refreshJoinToken(ctx context.Context, s *scope, secret *corev1.Secret) (ctrl.Result, error) {
	id := secret.Annotations[bootstrapv1.TokenIDAnnotation]
	if id == "" || !s.owner.needsJoinToken() {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("tokenID", id)
	expires := r.tokenExpiry()
	valid, err := r.Tokens.Refresh(ctx, s.clusterKey(), id, expires, r.tokenKeepAfter())
	switch {
	case errors.Is(err, clustercache.ErrClusterNotConnected):
		// A manager that just started has not connected yet: nothing is known to have
		// changed, so the condition stays as it is (flipping it would cost two writes per
		// config on every restart).
		log.V(4).Info("Workload cluster not connected yet, keeping the join token condition")
		s.joinToken = conditions.Get(s.config, bootstrapv1.JoinTokenAvailableCondition)
		return r.retryOnceConnected(s), nil
	case err == nil:
		log.V(4).Info("Join token valid", "until", valid)
		s.joinToken = validJoinTokenCondition(id, valid)
		return ctrl.Result{RequeueAfter: r.tokenRefreshInterval()}, nil
	case !apierrors.IsNotFound(err):
		log.Info("Could not refresh the join token, retrying", "reason", err.Error())
		s.joinToken = joinTokenCondition(metav1.ConditionFalse, bootstrapv1.JoinTokenUnavailableReason,
			"cannot refresh bootstrap token %s in the workload cluster, retrying: %v", id, err)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}

	t, role, err := joinTokenOf(secret.Data["value"], id)
	if err != nil {
		// Only data this provider did not write can get here; nothing can repair it.
		s.joinToken = joinTokenCondition(metav1.ConditionFalse, bootstrapv1.JoinTokenUnavailableReason,
			"bootstrap token %s no longer exists and cannot be re-created from the bootstrap data: %v; replace the %s", id, err, s.owner.kind())
		return ctrl.Result{}, nil
	}
	if err := r.Tokens.Create(ctx, s.clusterKey(), t, role, expires); err != nil && !apierrors.IsAlreadyExists(err) {
		log.Info("Could not re-create the join token, retrying", "reason", err.Error())
		s.joinToken = joinTokenCondition(metav1.ConditionFalse, bootstrapv1.JoinTokenUnavailableReason,
			"bootstrap token %s no longer exists in the workload cluster and re-creating it failed, retrying: %v", id, err)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	log.Info("Re-created the join token of existing bootstrap data", "role", role)
	s.joinToken = joinTokenCondition(metav1.ConditionTrue, bootstrapv1.JoinTokenRecreatedReason,
		"bootstrap token %s no longer existed in the workload cluster (expired or deleted) and was re-created from the bootstrap data at %s; valid until %s",
		id, r.Now().UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339))
	return ctrl.Result{RequeueAfter: r.tokenRefreshInterval()}, nil
}

// validJoinTokenCondition says a generated token is valid until its expiration. The token's
// creation and every later look at it say it in the same words, so that a reconcile that finds
// the token as it was created has no condition to patch.
func validJoinTokenCondition(id string, until time.Time) *metav1.Condition {
	return joinTokenCondition(metav1.ConditionTrue, bootstrapv1.JoinTokenValidReason,
		"bootstrap token %s is valid until %s and refreshed while a node may join with it", id, until.UTC().Format(time.RFC3339))
}

func joinTokenCondition(status metav1.ConditionStatus, reason, format string, args ...any) *metav1.Condition {
	return &metav1.Condition{Type: bootstrapv1.JoinTokenAvailableCondition, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// joinTokenOf reads the bootstrap token of the k0s join token a document writes.
func joinTokenOf(data []byte, id string) (token.BootstrapToken, token.K0sTokenRole, error) {
	doc, err := cloudconfig.Unmarshal(data)
	if err != nil {
		return token.BootstrapToken{}, "", err
	}
	for _, steps := range doc.Stages {
		for _, step := range steps {
			for _, f := range step.Files {
				if f.Path != render.K0sTokenPath {
					continue
				}
				info, err := token.ParseK0sJoinToken(f.Content)
				if err != nil {
					return token.BootstrapToken{}, "", err
				}
				if info.Token.ID != id {
					return token.BootstrapToken{}, "", fmt.Errorf("the data holds bootstrap token %s, not %s", info.Token.ID, id)
				}
				return info.Token, info.Role, nil
			}
		}
	}
	return token.BootstrapToken{}, "", fmt.Errorf("the data writes no %s", render.K0sTokenPath)
}

// reconcilePrerequisites waits for what every node needs: provisioned cluster infrastructure
// (infrastructure machines usually wait for bootstrap data, so the Cluster's is the one that
// matters), the control-plane endpoint the node will be told about, and a version.
func (r *Reconciler) reconcilePrerequisites(_ context.Context, s *scope) (ctrl.Result, error) {
	c := s.cluster
	if !ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false) {
		s.wait(bootstrapv1.WaitingForClusterInfrastructureReason, "Cluster %s infrastructure is not provisioned yet", c.Name)
		return ctrl.Result{}, nil
	}
	if !c.Spec.ControlPlaneEndpoint.IsValid() {
		s.wait(bootstrapv1.WaitingForControlPlaneEndpointReason, "Cluster %s has no spec.controlPlaneEndpoint yet", c.Name)
		return ctrl.Result{}, nil
	}

	version, ownerVersion := s.config.Spec.KubernetesVersion, s.owner.version()
	switch {
	case version == "" && ownerVersion == "":
		s.wait(bootstrapv1.WaitingForKubernetesVersionReason, "set spec.kubernetesVersion, or spec.version of %s %s", s.owner.kind(), s.owner.object().GetName())
		return ctrl.Result{}, nil
	case version == "":
		version = ownerVersion
	case ownerVersion != "" && !sameVersion(version, ownerVersion):
		s.wait(bootstrapv1.InvalidConfigurationReason, "spec.kubernetesVersion %s differs from %s %s spec.version %s: make them equal or leave spec.kubernetesVersion empty",
			version, s.owner.kind(), s.owner.object().GetName(), ownerVersion)
		return ctrl.Result{}, nil
	}
	// The node refuses to start a distribution other than the version asked for (the
	// preflight), so data whose image ships another version would leave the Machine without a
	// Node. Admission compares the image with the spec's version; the Machine's version is only
	// known here.
	if img, ok := syntax.ParseKairosImage(s.config.Spec.Image); ok && !syntax.ImageShipsVersion(img.SoftwareVersion(), version) {
		source := "spec.kubernetesVersion"
		if s.config.Spec.KubernetesVersion == "" {
			source = fmt.Sprintf("%s %s spec.version", s.owner.kind(), s.owner.object().GetName())
		}
		s.wait(bootstrapv1.InvalidConfigurationReason, "spec.image %s ships %s %s, but %s is %s: the node would refuse to start %s; use the image of %s, or the version the image ships",
			s.config.Spec.Image, img.Distribution, img.SoftwareVersion(), source, version, img.Distribution, version)
		return ctrl.Result{}, nil
	}
	if s.config.Spec.Role == bootstrapv1.RoleControlPlane && s.owner.pool != nil {
		s.wait(bootstrapv1.InvalidConfigurationReason, "MachinePools cannot run control-plane nodes: use role worker, or a KairosControlPlane for the control plane")
		return ctrl.Result{}, nil
	}

	endpoint := render.Endpoint{Host: c.Spec.ControlPlaneEndpoint.Host, Port: c.Spec.ControlPlaneEndpoint.Port}
	if err := render.CheckEndpoint(endpoint); err != nil {
		// Checked before anything (a join token) is built from it.
		var msgs []string
		for _, fe := range render.FieldErrors(err) {
			msgs = append(msgs, fmt.Sprintf("Cluster %s spec.controlPlaneEndpoint.%s: %v", c.Name,
				strings.ToLower(strings.TrimPrefix(fe.Field, "Endpoint.")), fe.Err))
		}
		s.wait(bootstrapv1.InvalidConfigurationReason, "%s", strings.Join(msgs, "; "))
		return ctrl.Result{}, nil
	}

	s.inputs.ClusterName = c.Name
	s.inputs.Namespace = c.Namespace
	s.inputs.Endpoint = endpoint
	s.inputs.Network = render.Network{
		APIServerPort: c.Spec.ClusterNetwork.APIServerPort,
		PodCIDRs:      c.Spec.ClusterNetwork.Pods.CIDRBlocks,
		ServiceCIDRs:  c.Spec.ClusterNetwork.Services.CIDRBlocks,
		ServiceDomain: c.Spec.ClusterNetwork.ServiceDomain,
	}
	s.inputs.KubernetesVersion = version
	if s.owner.machine != nil {
		s.inputs.MachineName = s.owner.machine.Name
	}
	return ctrl.Result{}, nil
}

// sameVersion compares versions ignoring distribution build metadata (v1.31.2+k3s1 is v1.31.2).
func sameVersion(a, b string) bool {
	trim := func(v string) string { v, _, _ = strings.Cut(v, "+"); return v }
	return trim(a) == trim(b)
}

// reconcileReferencedSecrets reads every Secret the spec references. Users' Secrets carry no
// cluster label, so they are read uncached and polled while missing.
func (r *Reconciler) reconcileReferencedSecrets(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.inputs.Secrets = map[userdata.Ref]string{}
	for _, ref := range userdata.References(&s.config.Spec) {
		secret := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.config.Namespace, Name: ref.Name}, secret)
		if apierrors.IsNotFound(err) {
			s.wait(bootstrapv1.WaitingForReferencedSecretReason, "Secret %s referenced by the spec does not exist", ref.Name)
			return ctrl.Result{RequeueAfter: waitRequeue}, nil
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
		}
		v, ok := secret.Data[ref.Key]
		if !ok {
			s.wait(bootstrapv1.WaitingForReferencedSecretReason, "Secret %s referenced by the spec has no key %q", ref.Name, ref.Key)
			return ctrl.Result{RequeueAfter: waitRequeue}, nil
		}
		s.inputs.Secrets[ref] = string(v)
	}
	return ctrl.Result{}, nil
}

// reconcileCredentials gathers the certificates and join token the node's role needs.
func (r *Reconciler) reconcileCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	initialized := controlPlaneInitialized(s.cluster)
	isControlPlane := s.config.Spec.Role == bootstrapv1.RoleControlPlane
	switch {
	case isControlPlane && !initialized:
		return r.reconcileInitCredentials(ctx, s)
	case !initialized:
		s.wait(bootstrapv1.WaitingForControlPlaneInitializedReason, "waiting for the control plane of Cluster %s to be initialized", s.cluster.Name)
		return ctrl.Result{}, nil
	}
	if err := r.initLock.Release(ctx, s.cluster); err != nil {
		return ctrl.Result{}, err
	}
	if isControlPlane {
		return r.reconcileControlPlaneJoinCredentials(ctx, s)
	}
	return r.reconcileWorkerJoinCredentials(ctx, s)
}

// reconcileInitCredentials lets exactly one control-plane Machine create the cluster, with
// cluster certificates created here when no control-plane provider created them first.
func (r *Reconciler) reconcileInitCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	acquired, err := r.initLock.Acquire(ctx, s.cluster, s.owner.machine.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !acquired {
		holder, err := r.initLock.Holder(ctx, s.cluster)
		if err != nil {
			return ctrl.Result{}, err
		}
		s.wait(bootstrapv1.WaitingForInitLockReason, "Machine %s is initializing Cluster %s; this node joins once the control plane is initialized", holder, s.cluster.Name)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}

	owner := *metav1.NewControllerRef(s.config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))
	pki, err := clustersecret.LookupOrGeneratePKI(ctx, r.Client, s.clusterKey(), owner)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("looking up or generating cluster certificates: %w", err)
	}
	s.inputs.PKI, s.inputs.Init = pki, true
	if s.config.Spec.Distribution == bootstrapv1.DistributionK3s {
		if _, err := clustersecret.LookupOrGenerateK3sToken(ctx, r.Client, s.clusterKey(), pki.ClusterCA.Cert, owner); err != nil {
			return ctrl.Result{}, fmt.Errorf("looking up or generating the k3s tokens: %w", err)
		}
		return r.lookupK3sTokens(ctx, s)
	}
	return ctrl.Result{}, nil
}

// restores reports whether the node starts the cluster again from an etcd snapshot.
func restores(c *bootstrapv1.KairosConfig) bool {
	return c.Spec.EtcdSnapshots != nil && c.Spec.EtcdSnapshots.Restore != ""
}

// reconcileControlPlaneJoinCredentials gathers what a control-plane node of an initialized
// cluster needs: the cluster's certificates, and the token that joins it. A node that restores
// the cluster from an etcd snapshot gets what the node that created it had instead: it creates
// the cluster again (Init) with the certificates and tokens the management cluster kept when
// every node was lost, and no join token. No init lock: the control plane asks for a restore
// only when no other control-plane Machine exists.
func (r *Reconciler) reconcileControlPlaneJoinCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	pki, err := clustersecret.LookupPKI(ctx, r.Client, s.clusterKey())
	if clustersecret.IsMissing(err) {
		s.wait(bootstrapv1.WaitingForClusterCertificatesReason, "%v", err)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	s.inputs.PKI, s.inputs.Init = pki, restores(s.config)
	if s.config.Spec.Distribution == bootstrapv1.DistributionK3s {
		return r.lookupK3sTokens(ctx, s)
	}
	if s.inputs.Init {
		return ctrl.Result{}, nil
	}
	return r.prepareK0sJoinToken(ctx, s, token.K0sControllerToken, pki.ClusterCA.Cert)
}

func (r *Reconciler) reconcileWorkerJoinCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	if t, ok := userdata.WorkerTokenOverride(&s.config.Spec, s.inputs.Secrets); ok {
		s.inputs.JoinToken = t
		return ctrl.Result{}, nil
	}
	if s.config.Spec.Distribution == bootstrapv1.DistributionK3s {
		return r.lookupK3sTokens(ctx, s)
	}
	ca, err := clustersecret.CACertificate(ctx, r.Client, s.clusterKey())
	if clustersecret.IsMissing(err) {
		s.wait(bootstrapv1.WaitingForClusterCertificatesReason, "%v", err)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.prepareK0sJoinToken(ctx, s, token.K0sWorkerToken, ca)
}

// lookupK3sTokens gives servers the server token and the agent token they accept, and
// agents the agent token only: whoever reads an agent's bootstrap data must not be able to
// join a server (which hands out the cluster's CA keys).
func (r *Reconciler) lookupK3sTokens(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, err := clustersecret.LookupK3sTokens(ctx, r.Client, s.clusterKey())
	if clustersecret.IsMissing(err) {
		s.wait(bootstrapv1.WaitingForJoinTokenReason, "%v", err)
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.config.Spec.Role == bootstrapv1.RoleControlPlane {
		s.inputs.JoinToken, s.inputs.AgentToken = t.Server, t.Agent
	} else {
		s.inputs.JoinToken = t.Agent
	}
	return ctrl.Result{}, nil
}

// prepareK0sJoinToken builds a k0s join token around a fresh bootstrap token, without
// registering the bootstrap token yet: reconcileDataSecret does that once the document has
// rendered, so that a spec or endpoint that cannot render leaves no token behind.
func (r *Reconciler) prepareK0sJoinToken(ctx context.Context, s *scope, role token.K0sTokenRole, caCert []byte) (ctrl.Result, error) {
	// No data is stored before its token can be registered: it would cost a token re-creation
	// later. While a manager that just started has not tried to connect yet, nothing has
	// changed and nothing is written: the connection event brings the config back.
	switch err := r.Tokens.Ready(ctx, s.clusterKey()); {
	case errors.Is(err, errConnecting):
		ctrl.LoggerFrom(ctx).V(4).Info("Workload cluster not connected yet, waiting before rendering the data")
		s.keepStatus = true
		s.stop()
		return r.retryOnceConnected(s), nil
	case err != nil:
		s.wait(bootstrapv1.WaitingForJoinTokenReason, "%s", describeTokenErr(err))
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	t, err := token.NewBootstrapToken()
	if err != nil {
		return ctrl.Result{}, err
	}
	server, err := token.K0sJoinURL(role, s.inputs.Endpoint.Host, s.inputs.Endpoint.Port)
	if err != nil {
		s.wait(bootstrapv1.InvalidConfigurationReason, "Cluster %s spec.controlPlaneEndpoint: %v", s.cluster.Name, err)
		return ctrl.Result{}, nil
	}
	joinToken, err := token.NewK0sJoinToken(role, server, caCert, t)
	if err != nil {
		s.wait(bootstrapv1.InvalidConfigurationReason, "cannot build the k0s join token: %v", err)
		return ctrl.Result{}, nil
	}
	s.inputs.JoinToken = joinToken
	s.pendingToken = &pendingToken{token: t, role: role}
	return ctrl.Result{}, nil
}

// reconcileDataSecret renders the document and stores it, once.
func (r *Reconciler) reconcileDataSecret(ctx context.Context, s *scope) (ctrl.Result, error) {
	spec := s.config.Spec.DeepCopy()
	spec.Default()
	data, err := userdata.Render(spec, s.inputs)
	if err != nil {
		s.wait(bootstrapv1.InvalidConfigurationReason, "cannot render the bootstrap data: %v", err)
		return ctrl.Result{}, nil
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       s.config.Namespace,
			Name:            s.config.Name,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: s.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s.config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": data},
	}
	pt := s.pendingToken
	if pt != nil {
		secret.Annotations = map[string]string{bootstrapv1.TokenIDAnnotation: pt.token.ID}
	}
	// The data first, then its token: a manager that stops between the two (a crash, a lost
	// leadership) finds the data on its next reconcile and re-creates the token it names
	// (refreshJoinToken), where the other order would leave a live token no data holds and
	// create a second one.
	if err := r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		s.wait(bootstrapv1.DataSecretCreationFailedReason, "creating the bootstrap data Secret failed, retrying")
		return ctrl.Result{}, fmt.Errorf("creating bootstrap data Secret: %w", err)
	} else if err != nil {
		// It exists (created since the cache was filled, or before this manager started): take
		// that one on the next reconcile instead of registering a token it does not hold.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	r.deferUntilCached(s.config, capicontrollerutil.StructuredObject(corev1.SchemeGroupVersion, "Secret"), secret.ResourceVersion)
	if pt != nil {
		expires := r.tokenExpiry()
		if err := r.Tokens.Create(ctx, s.clusterKey(), pt.token, pt.role, expires); err != nil && !apierrors.IsAlreadyExists(err) {
			// The data is not published until its token exists: the next reconcile finds the
			// data and re-creates the token from it.
			s.wait(bootstrapv1.WaitingForJoinTokenReason, "%s", describeTokenErr(err))
			return ctrl.Result{RequeueAfter: waitRequeue}, nil
		}
		ctrl.LoggerFrom(ctx).Info("Created join token in the workload cluster", "role", pt.role, "tokenID", pt.token.ID)
		s.tokenID = pt.token.ID
		s.joinToken = validJoinTokenCondition(pt.token.ID, expires)
	}
	ctrl.LoggerFrom(ctx).Info("Created bootstrap data", "Secret", klog.KObj(secret), "init", s.inputs.Init)
	s.dataSecretName = secret.Name
	// What the next reconcile would report about the Node goes into this one's status patch.
	res := r.reconcileNodeProviderID(ctx, s)
	if s.tokenID != "" {
		res = util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: r.tokenRefreshInterval()})
	}
	return res, nil
}

// controlPlaneInitialized reads the Cluster's initialization: from a control-plane provider's
// status field, or, without one, from the ControlPlaneInitialized condition Cluster API sets
// when the first control-plane Machine has a node.
func controlPlaneInitialized(c *clusterv1.Cluster) bool {
	return ptr.Deref(c.Status.Initialization.ControlPlaneInitialized, false) ||
		conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition)
}

// reconcileNodeProviderID gives the Node of a Machine's data the Machine's provider ID (see
// providerID.source Machine): the node registers without one, the infrastructure provider
// sets the Machine's whenever it knows it, and Cluster API links a Machine to the Node that
// carries the same ID. Nothing is read once the Machine has its nodeRef.
func (r *Reconciler) reconcileNodeProviderID(ctx context.Context, s *scope) ctrl.Result {
	m := s.owner.machine
	if m == nil {
		return ctrl.Result{} // a MachinePool: no Machine to take the ID from
	}
	name := userdata.NodeName(&s.config.Spec, m.Name)
	if name == "" {
		return ctrl.Result{} // the provider ID comes from the distribution
	}
	if m.Status.NodeRef.IsDefined() {
		s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionTrue, bootstrapv1.NodeProviderIDSetReason,
			"Node %s carries provider ID %s and is linked to Machine %s", m.Status.NodeRef.Name, m.Spec.ProviderID, m.Name)
		return ctrl.Result{}
	}
	if m.Spec.ProviderID == "" {
		// The Machine watch brings the provider ID.
		s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionFalse, bootstrapv1.WaitingForMachineProviderIDReason,
			"waiting for the infrastructure provider to set Machine %s spec.providerID", m.Name)
		return ctrl.Result{}
	}
	got, err := r.Nodes.SetProviderID(ctx, s.clusterKey(), name, m.Spec.ProviderID)
	switch {
	case errors.Is(err, clustercache.ErrClusterNotConnected):
		s.nodeProviderID = conditions.Get(s.config, bootstrapv1.NodeProviderIDCondition)
		return r.retryOnceConnected(s)
	case apierrors.IsNotFound(err):
		s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionFalse, bootstrapv1.WaitingForNodeReason,
			"waiting for Node %s to register in the workload cluster", name)
		return ctrl.Result{RequeueAfter: waitRequeue}
	case err != nil:
		ctrl.LoggerFrom(ctx).Info("Could not give the Node its Machine's provider ID, retrying", "node", name, "reason", err.Error())
		s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionFalse, bootstrapv1.WaitingForNodeReason,
			"cannot reach Node %s in the workload cluster, retrying: %v", name, err)
		return ctrl.Result{RequeueAfter: waitRequeue}
	case got != m.Spec.ProviderID:
		s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionFalse, bootstrapv1.NodeProviderIDConflictReason,
			"Node %s registered with provider ID %s, but Machine %s has %s; a Node's provider ID never changes, so Cluster API cannot link them: delete the Node (the kubelet registers it again without one) or the Machine",
			name, got, m.Name, m.Spec.ProviderID)
		return ctrl.Result{RequeueAfter: waitRequeue}
	}
	s.nodeProviderID = nodeProviderIDCondition(metav1.ConditionTrue, bootstrapv1.NodeProviderIDSetReason,
		"Node %s carries provider ID %s", name, got)
	return ctrl.Result{}
}

func nodeProviderIDCondition(status metav1.ConditionStatus, reason, format string, args ...any) *metav1.Condition {
	return &metav1.Condition{Type: bootstrapv1.NodeProviderIDCondition, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
