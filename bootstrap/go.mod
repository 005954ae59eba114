module github.com/kairos-capi/kairos-capi/bootstrap

go 1.26.0
