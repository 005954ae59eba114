module github.com/kairos-capi/kairos-capi/controlplane

go 1.26.0
