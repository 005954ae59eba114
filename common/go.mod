module github.com/kairos-capi/kairos-capi/common

go 1.26.3

require (
	github.com/mudler/yip v1.25.1
	go.yaml.in/yaml/v3 v3.0.5
	k8s.io/apimachinery v0.36.3
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/google/shlex v0.0.0-20191202100458-e7afc7fbc510 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/itchyny/gojq v0.12.19 // indirect
	github.com/itchyny/timefmt-go v0.1.8 // indirect
	github.com/onsi/ginkgo/v2 v2.32.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/twpayne/go-vfs/v5 v5.0.5 // indirect
	golang.org/x/mod v0.40.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/tools v0.49.0 // indirect
	gopkg.in/check.v1 v1.0.0-20201130134442-10cb98267c6c // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
