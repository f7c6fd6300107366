/** glibc's malloc_trim(0): true when free heap pages were handed back to the OS; undefined without glibc. */
export declare function trim(): boolean | undefined;
