package bucket

var LimitsLuaForTest = limitsLua
