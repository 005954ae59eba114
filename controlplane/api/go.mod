module github.com/kairos-capi/kairos-capi/controlplane/api

go 1.26.0
