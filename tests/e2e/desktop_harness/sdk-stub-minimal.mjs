// An OLDER Desktop host: none of PANES_AREA, host.state.cwd or useValue exist.
export const sdkVersion = 'minimal-stub'
