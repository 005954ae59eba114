module github.com/kairos-capi/kairos-capi/common

go 1.26.0
