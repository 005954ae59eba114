package v1beta2

// Default fills the defaults of a KairosConfigSpec. It is used by the KairosConfig and
// KairosConfigTemplate webhooks and by the control-plane provider, which must compare specs
// with defaults applied on both sides so that a provider upgrade that only adds defaults
// never looks like a change.
func (s *KairosConfigSpec) Default() {
	if s.Role == "" {
		s.Role = RoleWorker
	}
	if s.Distribution == "" {
		s.Distribution = DistributionK0s
	}
	if s.ProviderID.Source == "" {
		s.ProviderID.Source = ProviderIDFromMachine
	}
	if s.UserName == "" {
		s.UserName = DefaultUserName
	}
	if s.UserPassword == "" && s.UserPasswordSecretRef == nil {
		s.UserPassword = DefaultUserPassword
	}
	if len(s.UserGroups) == 0 {
		s.UserGroups = []string{DefaultUserGroup}
	}
	defaultSecretKey(s.UserPasswordSecretRef)
	defaultSecretKey(s.WorkerTokenSecretRef)
	for i := range s.Manifests {
		defaultSecretKey(s.Manifests[i].ContentFrom)
	}
	for i := range s.Files {
		defaultSecretKey(s.Files[i].ContentFrom)
	}
	for i := range s.CloudConfigFragments {
		f := &s.CloudConfigFragments[i]
		if f.Position == "" {
			f.Position = FragmentAppend
		}
		defaultSecretKey(f.ContentFrom)
	}
	if s.EtcdSnapshots != nil {
		s.EtcdSnapshots.Default()
	}
	if s.Install != nil {
		if s.Install.Auto == nil {
			auto := true
			s.Install.Auto = &auto
		}
		if s.Install.Device == "" {
			s.Install.Device = "auto"
		}
		if s.Install.Reboot == nil && !s.Install.Poweroff {
			reboot := true
			s.Install.Reboot = &reboot
		}
	}
}

func defaultSecretKey(ref *SecretKeyReference) {
	if ref != nil && ref.Key == "" {
		ref.Key = DefaultSecretKey
	}
}

// UsesDefaultPassword reports whether the login user ends up with the well-known development
// password; admission warns about it.
func (s *KairosConfigSpec) UsesDefaultPassword() bool {
	return s.UserPasswordSecretRef == nil && (s.UserPassword == "" || s.UserPassword == DefaultUserPassword)
}
