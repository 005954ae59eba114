module github.com/kairos-capi/kairos-capi/release

go 1.26.0
